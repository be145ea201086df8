/* src/plan/plan_cluster.c — defines: the allocator's view of a cluster's workers (plan_build.h). */
#include "plan/plan_build.h"
#include "predict/simulate.h"

qs_status qs_planb_workers_from_cluster(const qs_cluster *c, const qs_profile *const *profiles, qs_planb_worker *w) {
    for (int r = 0; r < c->n_workers; r++) {
        const qs_cluster_worker *cw = &c->workers[r];
        if (cw->precision[0] || cw->plan[0])
            return QS_FAIL(QS_ERR_INVALID_ARG, "%s sets the precisions of worker %d: the plan chooses them; remove "
                           "\"precision\"/\"plan\" from the cluster file", c->origin, r);
        w[r] = (qs_planb_worker){.type = cw->type, .profile = profiles[r], .slowdown = 1,
                                 .memory_cap = cw->memory_mb > 0 ? cw->memory_mb * 1048576 : 0};
        /* a profile taken under the worker's emulation already holds its slowdown (as simulate) */
        QS_TRY(qs_sim_worker_emulation(profiles[r], cw, r, &w[r].slowdown, &w[r].slow_whole_step));
    }
    return QS_OK;
}
