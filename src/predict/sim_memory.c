/* src/predict/sim_memory.c — the replayer's memory prediction through the model's memory plan
 * (see sim_memory.h). */
#include "predict/sim_memory.h"

#include <stdlib.h>
#include <string.h>
#include "graph/memory_plan.h"

static bool qs_sim_every_attention(void *ctx, const qs_attention_desc *d) {
    (void)ctx;
    (void)d;
    return true;
}

qs_status qs_sim_memory(const qs_sim_memory_input *in, qs_memory_report *r, size_t *peak) {
    const qs_model *m = in->m;
    memset(r, 0, sizeof *r);
    *peak = 0;
    qs_model c = *m; /* a copy to fuse attention in, as qs_model_setup does on the backend */
    c.be = NULL;
    c.batch = in->batch;
    c.nodes = malloc((size_t)m->n_nodes * sizeof *c.nodes);
    if (!c.nodes) return QS_FAIL(QS_ERR_OOM, "out of memory predicting the memory of %s", m->arch);
    memcpy(c.nodes, m->nodes, (size_t)m->n_nodes * sizeof *c.nodes);
    if (in->facts.fused_attention)
        qs_model_fuse_attention(&c, in->attention_supported ? in->attention_supported : qs_sim_every_attention,
                                in->attention_ctx);
    qs_memory_plan p;
    qs_status st = qs_model_memory_plan(&c, in->batch, &in->facts, in->workspace, &p);
    free(c.nodes);
    if (st != QS_OK) return qs_error_wrap(st, "predicting the memory of %s: ", m->arch);
    r->params = m->params.bytes;
    r->grads = m->params.bytes;
    r->optimizer = in->optimizer ? qs_optim_state_bytes(in->optimizer, &m->params) : 0;
    r->buffers = m->buffers.bytes + sizeof *m->step_dev; /* and the device step counter */
    r->activations = p.arena_bytes[QS_MEM_ACTIVATIONS];
    r->activation_grads = p.arena_bytes[QS_MEM_ACTIVATION_GRADS];
    r->saved = p.arena_bytes[QS_MEM_SAVED];
    r->workspace = p.arena_bytes[QS_MEM_WORKSPACE];
    r->labels = p.arena_bytes[QS_MEM_LABELS];
    *peak = r->params + r->grads + r->optimizer + r->buffers + qs_memory_plan_bytes(&p);
    qs_memory_plan_free(&p);
    return QS_OK;
}

qs_mem_facts qs_sim_memory_facts_read(const cJSON *run, const char *backend) {
    const bool dflt = backend && strcmp(backend, "cuda") == 0;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(run, "memory_facts");
    const char *const keys[3] = {"fp8_wants_transposed", "pointwise_conv_as_linear", "fused_attention"};
    bool v[3];
    for (int k = 0; k < 3; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(f, keys[k]);
        v[k] = cJSON_IsBool(x) ? cJSON_IsTrue(x) : dflt;
    }
    return (qs_mem_facts){.fp8_wants_transposed = v[0], .pointwise_conv_as_linear = v[1], .fused_attention = v[2]};
}

bool qs_sim_profile_attention_fused(void *ctx, const qs_attention_desc *d) {
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive((const cJSON *)ctx, "runs");
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(runs, d->dtype == QS_BF16 ? "bf16" : "fp16");
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(run, "ops"), *op, *other;
    cJSON_ArrayForEach(op, ops) {
        const cJSON *into = cJSON_GetObjectItemCaseSensitive(op, "fused_into");
        if (!cJSON_IsString(into)) continue;
        cJSON_ArrayForEach(other, ops) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(other, "name");
            const cJSON *kind = cJSON_GetObjectItemCaseSensitive(other, "kind");
            if (cJSON_IsString(name) && cJSON_IsString(kind) && strcmp(name->valuestring, into->valuestring) == 0 &&
                strcmp(kind->valuestring, "MergeHeads") == 0)
                return true;
        }
    }
    return false;
}
