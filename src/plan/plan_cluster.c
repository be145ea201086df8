/* src/plan/plan_cluster.c — the allocator's view of a cluster's workers (plan_build.h). */
#include <string.h>

#include "parallel/cpu_quota.h"
#include "plan/plan_build.h"

qs_status qs_planb_workers_from_cluster(const qs_cluster *c, const cJSON *const *profiles,
                                        const char *const *profile_paths, qs_planb_worker *w) {
    for (int r = 0; r < c->n_workers; r++) {
        const qs_cluster_worker *cw = &c->workers[r];
        if (cw->precision[0] || cw->plan[0])
            return QS_FAIL(QS_ERR_INVALID_ARG, "%s sets the precisions of worker %d: the plan chooses them; remove "
                           "\"precision\"/\"plan\" from the cluster file", c->origin, r);
        w[r] = (qs_planb_worker){.type = cw->type, .profile = profiles[r], .profile_path = profile_paths[r],
                                 .slowdown = 1, .memory_cap = cw->memory_mb > 0 ? cw->memory_mb * 1048576 : 0};
        /* a profile taken under the worker's emulation already holds its slowdown (as simulate) */
        const cJSON *pe = cJSON_GetObjectItem(profiles[r], "emulation");
        double ps = pe ? cJSON_GetNumberValue(cJSON_GetObjectItem(pe, "slowdown")) : 1, ws = cw->slowdown;
        if (pe && !(ps == ws))
            return QS_FAIL(QS_ERR_MISMATCH, "%s was taken under an emulated slowdown of %g, but worker %d has %g: "
                           "profile with --cluster for this cluster", profile_paths[r], ps, r, ws);
        if (!pe && ws > 1) {
            w[r].slowdown = ws;
            w[r].slow_whole_step = strcmp(cw->emulation_method, "cgroup") == 0 ||
                                   (strcmp(cw->emulation_method, "auto") == 0 && qs_cpu_quota_available(NULL, 0));
        }
    }
    return QS_OK;
}
