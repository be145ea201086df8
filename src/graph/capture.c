/* src/graph/capture.c — defines: a model's training passes replayed as captured backend graphs
 * (CUDA graphs; graph/graph.h "captured passes"). A replay queues every op of a pass with one
 * launch, which removes the host's per-op launch cost from the step; the ops, pointers and
 * arguments are those of the captured pass, so a replay computes what the eager pass computes.
 * What varies from step to step must therefore live in backend memory: the step counter that
 * stochastic rounding and dropout masks read does (qs_model.step_dev); what does not is listed
 * by qs_capture_blocker. */
#include <stdio.h>

#include "graph/graph.h"

const char *qs_capture_blocker(const qs_model *m) {
    if (!m->be || !m->be->ops->capture_begin) return "the backend has no graph capture";
    if (m->grads_ready || m->grads_done) return "data parallelism runs host code between the backward ops";
    if (m->emulation.slowdown > 1 || m->emulation.cpu_threads > 0) return "an emulated slowdown times every op";
    return NULL;
}

void qs_capture_release(qs_model *m) {
    qs_capture *c = &m->capture;
    for (int p = 0; p < 2; p++) {
        if (c->graph[p]) m->be->ops->graph_destroy(m->be, c->graph[p]);
        c->graph[p] = NULL;
        c->warm[p] = false;
    }
}

static const char *const qs_pass_names[2] = {"forward", "backward"};

/* Capture the pass (nothing runs), then launch the capture. On failure the pass has not
 * run: the capture is given up for good (logged), the host state the capturing pass left is
 * undone (dY quantized "in this step") and the pass runs eagerly. */
static qs_status qs_capture_pass(qs_model *m, qs_pass pass, qs_status (*eager)(qs_model *m)) {
    qs_capture *c = &m->capture;
    const qs_backend_ops *ops = m->be->ops;
    QS_TRY(ops->capture_begin(m->be, m->stream));
    qs_status st = eager(m);
    char why[512] = "";
    if (st != QS_OK) snprintf(why, sizeof why, "%s", qs_last_error());
    void *g = NULL;
    qs_status se = ops->capture_end(m->be, m->stream, &g);
    if (st == QS_OK && se == QS_OK) {
        c->graph[pass] = g;
        if (pass == QS_PASS_BACKWARD) c->loss_scale = m->loss_scale;
        qs_log_debug(m->log, "step %lld: %s pass captured as a graph", (long long)m->step, qs_pass_names[pass]);
        c->replays[pass]++;
        return ops->graph_launch(m->be, m->stream, g);
    }
    if (se != QS_OK && !why[0]) snprintf(why, sizeof why, "%s", qs_last_error());
    ops->graph_destroy(m->be, g);
    qs_error_clear();
    qs_capture_release(m);
    c->failed = true;
    snprintf(c->failure, sizeof c->failure, "capturing the %s pass failed: %s", qs_pass_names[pass], why);
    qs_log_warn(m->log, "%s; every pass runs op by op from now on", c->failure);
    for (int i = 0; i < m->n_nodes; i++) m->nodes[i].quant_step = -1;
    c->eager[pass]++;
    return eager(m);
}

qs_status qs_capture_run(qs_model *m, qs_pass pass, qs_status (*eager)(qs_model *m)) {
    qs_capture *c = &m->capture;
    if (!c->on || c->failed || m->timing || m->busy.on || qs_capture_blocker(m)) {
        c->eager[pass]++;
        c->warm[pass] = true;
        return eager(m);
    }
    if (pass == QS_PASS_BACKWARD && c->graph[pass] && c->loss_scale != m->loss_scale) {
        m->be->ops->graph_destroy(m->be, c->graph[pass]); /* launches already queued complete */
        c->graph[pass] = NULL;
    }
    if (c->graph[pass]) {
        c->replays[pass]++;
        return m->be->ops->graph_launch(m->be, m->stream, c->graph[pass]);
    }
    if (!c->warm[pass]) { /* lazy set-up inside the libraries happens here, not in a capture */
        c->warm[pass] = true;
        c->eager[pass]++;
        return eager(m);
    }
    return qs_capture_pass(m, pass, eager);
}
