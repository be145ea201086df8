/* src/graph/busy.c — the GPU-busy meter of a model (graph.h qs_model_busy_*): backend events
 * recorded in pairs around ops on the model's stream, their elapsed times summed. */
#include <stdlib.h>

#include "graph/graph.h"

qs_status qs_model_busy_start(qs_model *m) {
    const qs_backend_ops *ops = m->be ? m->be->ops : NULL;
    if (!ops || !ops->event_create || !ops->event_record || !ops->event_elapsed_ms)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "model %s: GPU-busy time needs a backend with events (a GPU); on the "
                       "CPU every op runs synchronously and the whole step is busy", m->arch);
    m->busy.on = true;
    m->busy.used = 0;
    return QS_OK;
}

qs_status qs_model_busy_mark(qs_model *m) {
    qs_busy_meter *b = &m->busy;
    if (!b->on) return QS_OK;
    if (b->used == b->cap) { /* grow: events are created once and reused every step */
        int cap = b->cap ? 2 * b->cap : 256;
        void **ev = realloc(b->ev, (size_t)cap * sizeof *ev);
        if (!ev) return QS_FAIL(QS_ERR_OOM, "out of host memory for %d GPU-busy events", cap);
        b->ev = ev;
        for (int i = b->cap; i < cap; i++) {
            qs_status st = m->be->ops->event_create(m->be, &b->ev[i]);
            if (st != QS_OK) {
                b->cap = i;
                return st;
            }
        }
        b->cap = cap;
    }
    return m->be->ops->event_record(m->be, m->stream, b->ev[b->used++]);
}

qs_status qs_model_busy_collect(qs_model *m, double *busy_ms) {
    qs_busy_meter *b = &m->busy;
    if (b->used == 0) return QS_OK;
    QS_TRY(m->be->ops->stream_sync(m->be, m->stream));
    double sum = 0;
    for (int i = 0; i + 1 < b->used; i += 2) {
        float ms = 0;
        QS_TRY(m->be->ops->event_elapsed_ms(m->be, b->ev[i], b->ev[i + 1], &ms));
        sum += ms;
    }
    b->used = 0;
    *busy_ms += sum;
    return QS_OK;
}

void qs_model_busy_stop(qs_model *m) {
    m->busy.on = false;
    m->busy.used = 0;
}

void qs_model_busy_free(qs_model *m) {
    qs_busy_meter *b = &m->busy;
    for (int i = 0; i < b->cap; i++) m->be->ops->event_destroy(m->be, b->ev[i]);
    free(b->ev);
    *b = (qs_busy_meter){0};
}
