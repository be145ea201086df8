/* src/train/train_split.c — defines: how a training job splits the global batch over the ranks
 * (train/train_job.h): the initial split, applying a split (with the memory cap), and dynamic
 * batching's re-splits. */
#include "train/train_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/batch_split.h"

/* The split of the global batch the run starts with (cfg->batch_split): even (--batch must
 * be divisible by the ranks), explicit, or even as the first measurement of dynamic batching. */
qs_status qs_train_initial_split(const qs_train_config *c, qs_train_job *j) {
    j->split = calloc((size_t)j->world, sizeof *j->split);
    if (!j->split) return QS_FAIL(QS_ERR_OOM, "out of memory for the batch split");
    const char *bs = c->batch_split ? c->batch_split : "even";
    j->dynamic = strcmp(bs, "dynamic") == 0;
    if (c->batch < j->world)
        return QS_FAIL(QS_ERR_INVALID_ARG, "--batch %lld (the global batch) is smaller than the %d ranks",
                       (long long)c->batch, j->world);
    if (strcmp(bs, "even") == 0 && c->batch % j->world != 0)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "--batch %lld (the global batch) must be divisible by the %d ranks, so that every rank "
                       "takes an equal share (or give the shares with --batch-split, or use --batch-split dynamic)",
                       (long long)c->batch, j->world);
    if (j->dynamic || strcmp(bs, "even") == 0) qs_batch_split_even(j->world, c->batch, j->split);
    else QS_TRY(qs_batch_split_parse(bs, j->world, c->batch, j->split));
    if (j->dynamic)
        QS_TRY(qs_batch_balance_init(&j->balance, j->world, j->rank, c->batch, (int)c->rebalance_every));
    j->local_batch = j->split[j->rank];
    return QS_OK;
}

/* The worker's memory cap (cluster file) against what the backend measures as allocated. */
qs_status qs_train_check_memory_cap(const qs_train_config *c, qs_train_job *j) {
    if (c->memory_cap_mb <= 0) return QS_OK;
    size_t used = 0;
    j->be->ops->memory_stats(j->be, &used, NULL);
    if (used > (size_t)c->memory_cap_mb << 20)
        return QS_FAIL(QS_ERR_OOM,
                       "rank %d (%s): the model needs %.1f MiB at batch %lld but the worker's memory cap is %lld MiB: "
                       "lower the batch, quantize more layers, or raise memory_mb in the cluster file",
                       j->rank, c->device_type ? c->device_type : "cpu", (double)used / 1048576.0,
                       (long long)j->local_batch, (long long)c->memory_cap_mb);
    return QS_OK;
}

/* Make `split` the ranks' local batches: this rank's model batch size, loader slice, gradient
 * weight and host batch buffers (the memory cap is checked again). */
qs_status qs_train_apply_split(const qs_train_config *c, qs_train_job *j, const int64_t *split) {
    if (split != j->split) memcpy(j->split, split, (size_t)j->world * sizeof *split);
    j->local_batch = split[j->rank];
    QS_TRY(qs_model_set_batch(j->m, j->local_batch));
    QS_TRY(qs_train_check_memory_cap(c, j));
    QS_TRY(qs_loader_set_slice(&j->loader, qs_batch_split_offset(split, j->rank), j->local_batch));
    qs_grad_sync_set_local_batch(&j->sync, j->local_batch, c->batch);
    qs_host_free(j->x);
    qs_host_free(j->y);
    j->x = qs_host_alloc((size_t)(j->local_batch * j->train.h * j->train.w * j->train.c) * sizeof(float));
    j->y = qs_host_alloc((size_t)(j->local_batch * j->train.label_len) * sizeof(int32_t));
    return j->x && j->y ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory for a batch of %lld", (long long)j->local_batch);
}

/* Dynamic batching, after every step: record this step's compute time (its time minus the
 * wait for the gradient all-reduce); at the end of a window, re-split in proportion to the
 * ranks' speeds when the shares change by more than 2%. */
qs_status qs_train_rebalance(const qs_train_config *c, qs_train_job *j, double step_ms, int64_t step) {
    if (!j->dynamic) return QS_OK;
    qs_batch_balance_record(&j->balance, step_ms - j->m->comm_wait_time.last_ms);
    if (!qs_batch_balance_due(&j->balance)) return QS_OK;
    int64_t *next = calloc((size_t)j->world, sizeof *next);
    double *speed = calloc((size_t)j->world, sizeof *speed);
    qs_status st = next && speed ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory re-splitting the batch");
    if (st == QS_OK) st = qs_batch_balance_propose(&j->balance, c->comm, c->collective_timeout_s, j->split, next, speed);
    if (st == QS_OK && qs_batch_split_changed(j->split, next, j->world, 0.02)) {
        char from[256], to[256], sp[256];
        size_t n = 0;
        qs_batch_split_format(j->split, j->world, from, sizeof from);
        qs_batch_split_format(next, j->world, to, sizeof to);
        sp[0] = 0;
        for (int r = 0; r < j->world && n < sizeof sp; r++)
            n += (size_t)snprintf(sp + n, sizeof sp - n, "%s%.2f", r ? ", " : "", speed[r]);
        qs_log_info(c->log, "dynamic batching after step %lld: speeds %s samples/ms, local batches %s -> %s",
                    (long long)step, sp, from, to);
        st = qs_train_apply_split(c, j, next);
        qs_batch_balance_restart(&j->balance);
        j->rebalances++;
    }
    free(next);
    free(speed);
    return st;
}
