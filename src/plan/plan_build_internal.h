/* src/plan/plan_build_internal.h — defines: what the files of `qsync plan`'s core share
 * (plan_build.c: the rounds of solving and replaying; plan_problem.c: the layers, models,
 * replays and each slower type's allocator problem; plan_build_doc.c: the plan document).
 * Not for use outside them. */
#ifndef QSYNC_PLAN_PLAN_BUILD_INTERNAL_H
#define QSYNC_PLAN_PLAN_BUILD_INTERNAL_H

#include "dag/dag.h"
#include "plan/allocator.h"
#include "plan/plan_build.h"
#include "predict/simulate.h"

#define QS_PB_MAX_TYPES 16

/* One slower device type's state. */
typedef struct qs_pb_type {
    const char *name;
    int tmpl;                      /* index of its first worker */
    int n_opts;
    qs_precision menu[QS_PREC_COUNT];
    qs_alloc_problem prob;
    qs_alloc_result greedy, exact;
    bool has_exact;
    const int32_t *choice;         /* the chosen plan (greedy's or exact's) */
    double sync_base_ms;           /* replay with this type all at the base, the others fastest-type */
    double sync_base_cal_ms;       /* the same, calibrated (src/predict/calibrate.h): the document's */
    qs_precision *prec;            /* [L] chosen precision per layer */
    int32_t rounds_tightened;      /* times its target or cap was lowered after a replay */
    bool best_effort;              /* no plan met T: the fastest plan was taken (request best_effort) */
} qs_pb_type;

typedef struct qs_pb_ctx {
    const qs_planb_request *rq;
    qs_precision base;             /* the profiles' highest precision: what the fastest type trains at */
    int n_layers;
    char (*layer)[QS_NAME_MAX];    /* [L] selectable layer names, in order */
    int *first_consumer;           /* [L] the first layer reading the same input */
    const char *types[QS_PB_MAX_TYPES]; /* the cluster's device types, in order of first worker */
    int n_types;
    const char *fast;              /* the fastest type */
    int fast_tmpl;                 /* its first worker */
    qs_pb_type t[QS_PB_MAX_TYPES]; /* the slower types */
    int n_slow;
} qs_pb_ctx;

/* The request's consistency (profiles of one model, config and batch, one base; ≥ 2 types; the
 * indicator's model and config) into c->base, c->types. */
qs_status qs_pb_check(qs_pb_ctx *c);
/* c->layer and c->first_consumer. */
qs_status qs_pb_layers(qs_pb_ctx *c);
/* Replay the cluster where worker r is played by template src[r] (NULL: itself) with layer
 * precisions prec[r] (NULL entries, or prec NULL: all at the base); calibrated (qs_simulate) for
 * the document, else the replay alone (qs_sim_replay), the scale the planner works on. */
qs_status qs_pb_replay(const qs_pb_ctx *c, const int *src, qs_precision *const *prec, bool calibrated,
                       qs_sim_result *out);
/* Type d's allocator problem: options from its profile's runs (the base first), costs as the
 * replayer charges them, fixed parts from a replay of d at the base among fastest-type workers. */
qs_status qs_pb_problem(const qs_pb_ctx *c, qs_pb_type *d);

/* The plan document: a section per device type, predictions (sim: the plan's replay, on whose
 * scale T is met or not; cal: its calibrated replay, the prediction). */
cJSON *qs_pb_document(const qs_pb_ctx *c, double T, const qs_sim_result *sim, const qs_sim_result *cal, int rounds);

#endif
