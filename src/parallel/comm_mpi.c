/* src/parallel/comm_mpi.c — defines: the process group on Open MPI (see comm.h); with coll_mpi.c
 * (the MPI transport) the only file that calls MPI. */
#include "parallel/comm.h"
#include "parallel/comm_mpi.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/timer.h"

struct qs_comm {
    bool mpi;
    int rank, world;
    /* step announcements (qs_comm_arrive): per peer, the last step heard, a posted receive and
     * the last send; this rank's own step */
    int64_t step;             /* step·QS_COMM_PHASES + phase of the last announcement */
    int64_t *heard, *recv_val, *send_val;
    double *heard_ms;         /* when each peer was last heard from (its announcements and heartbeats) */
    double sent_ms;           /* when this rank last announced */
    MPI_Request *recv_req, *send_req;
};

#define QS_COMM_TAG_ARRIVE 7207

/* Open MPI's launcher exports the world size to every rank it starts. */
static bool launched_by_mpirun(void) { return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK"); }

qs_status qs_mpi_check(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return QS_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return QS_FAIL(QS_ERR_BACKEND, "MPI %s failed: %s", what, msg);
}

qs_status qs_comm_init(int *argc, char ***argv, qs_comm **out) {
    qs_comm *c = calloc(1, sizeof *c);
    if (!c) return QS_FAIL(QS_ERR_OOM, "out of memory for the communicator");
    c->world = 1;
    if (launched_by_mpirun()) {
        int provided;
        qs_status st = qs_mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "initialisation");
        if (st != QS_OK) {
            free(c);
            return st;
        }
        c->mpi = true;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &c->world);
        const size_t w = (size_t)c->world;
        c->heard = calloc(w, sizeof *c->heard);
        c->heard_ms = calloc(w, sizeof *c->heard_ms);
        c->recv_val = calloc(w, sizeof *c->recv_val);
        c->send_val = calloc(w, sizeof *c->send_val);
        c->recv_req = calloc(w, sizeof *c->recv_req);
        c->send_req = calloc(w, sizeof *c->send_req);
        if (!c->heard || !c->heard_ms || !c->recv_val || !c->send_val || !c->recv_req || !c->send_req) {
            qs_comm_finalize(c);
            return QS_FAIL(QS_ERR_OOM, "out of memory for the communicator");
        }
        for (int p = 0; p < c->world; p++) {
            c->heard_ms[p] = qs_now_ms();
            c->recv_req[p] = c->send_req[p] = MPI_REQUEST_NULL;
            if (p != c->rank)
                MPI_Irecv(&c->recv_val[p], 1, MPI_INT64_T, p, QS_COMM_TAG_ARRIVE, MPI_COMM_WORLD, &c->recv_req[p]);
        }
    }
    *out = c;
    return QS_OK;
}

void qs_comm_finalize(qs_comm *c) {
    if (!c) return;
    if (c->mpi) {
        for (int p = 0; c->recv_req && p < c->world; p++) {
            if (c->recv_req[p] != MPI_REQUEST_NULL) {
                MPI_Cancel(&c->recv_req[p]);
                MPI_Wait(&c->recv_req[p], MPI_STATUS_IGNORE);
            }
            if (c->send_req[p] != MPI_REQUEST_NULL) MPI_Wait(&c->send_req[p], MPI_STATUS_IGNORE);
        }
        MPI_Finalize();
    }
    free(c->heard);
    free(c->heard_ms);
    free(c->recv_val);
    free(c->send_val);
    free(c->recv_req);
    free(c->send_req);
    free(c);
}

/* Take in the peers' announcements received so far (re-posting each receive). */
static void arrivals_poll(qs_comm *c) {
    for (int p = 0; p < c->world; p++) {
        int flag = 1;
        while (p != c->rank && c->recv_req[p] != MPI_REQUEST_NULL && flag) {
            MPI_Test(&c->recv_req[p], &flag, MPI_STATUS_IGNORE);
            if (!flag) break;
            if (c->recv_val[p] > c->heard[p]) c->heard[p] = c->recv_val[p];
            c->heard_ms[p] = qs_now_ms();
            MPI_Irecv(&c->recv_val[p], 1, MPI_INT64_T, p, QS_COMM_TAG_ARRIVE, MPI_COMM_WORLD, &c->recv_req[p]);
        }
    }
}

/* Send this rank's current mark to every peer that has taken the previous one. */
static qs_status send_marks(qs_comm *c) {
    const int64_t mark = c->step;
    c->sent_ms = qs_now_ms();
    for (int p = 0; p < c->world; p++) {
        if (p == c->rank) continue;
        int done = 1;
        if (c->send_req[p] != MPI_REQUEST_NULL) MPI_Test(&c->send_req[p], &done, MPI_STATUS_IGNORE);
        if (!done) continue; /* the peer has not taken the last one: it is behind, no need to queue more */
        c->send_val[p] = mark;
        QS_TRY(qs_mpi_check(MPI_Isend(&c->send_val[p], 1, MPI_INT64_T, p, QS_COMM_TAG_ARRIVE, MPI_COMM_WORLD,
                                   &c->send_req[p]),
                         "Isend (step announcement)"));
    }
    arrivals_poll(c);
    return QS_OK;
}

qs_status qs_comm_arrive(qs_comm *c, int64_t step, int phase) {
    if (!c->mpi || c->world == 1) return QS_OK;
    if (phase >= QS_COMM_PHASES) phase = QS_COMM_PHASES - 1;
    const int64_t mark = step * QS_COMM_PHASES + phase;
    if (mark <= c->step) return QS_OK;
    c->step = mark;
    return send_marks(c);
}

void qs_comm_heartbeat(qs_comm *c) {
    if (!c || !c->mpi || c->world == 1) return;
    if (qs_now_ms() - c->sent_ms > 500) (void)send_marks(c);
    else arrivals_poll(c);
}

/* A waiting rank repeats its announcement every 0.5 s (qs_comm_heartbeat); a stopped or dead
 * one falls silent. */
qs_status qs_comm_timeout_error(qs_comm *c, const char *what, double timeout_s) {
    if (c->mpi) arrivals_poll(c);
    const double now = qs_now_ms();
    char missing[256] = "";
    size_t len = 0;
    for (int pass = 0; pass < 2 && len == 0; pass++)
        for (int p = 0; p < c->world && len + 64 < sizeof missing; p++) {
            if (p == c->rank) continue;
            const double silent_s = (now - c->heard_ms[p]) / 1e3;
            if (pass == 0 ? silent_s > 0.5 * timeout_s : c->heard[p] < c->step)
                len += (size_t)snprintf(missing + len, sizeof missing - len, "%srank %d (silent for %.0f s, last at step %lld)",
                                        len ? ", " : "", p, silent_s, (long long)(c->heard[p] / QS_COMM_PHASES));
        }
    if (len)
        return QS_FAIL(QS_ERR_TIMEOUT,
                       "rank %d of %d: %s did not complete within %g s at step %lld: %s did not arrive — stalled or "
                       "dead (raise --collective-timeout if steps are really this slow)",
                       c->rank, c->world, what, timeout_s, (long long)(c->step / QS_COMM_PHASES), missing);
    return QS_FAIL(QS_ERR_TIMEOUT,
                   "rank %d of %d: %s did not complete within %g s at step %lld although every rank is alive and got "
                   "as far as this one (raise --collective-timeout if steps are really this slow)",
                   c->rank, c->world, what, timeout_s, (long long)(c->step / QS_COMM_PHASES));
}

void qs_comm_abort(qs_comm *c, int code) {
    if (c && c->mpi) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

int qs_comm_rank(const qs_comm *c) { return c ? c->rank : 0; }
int qs_comm_world(const qs_comm *c) { return c ? c->world : 1; }
const char *qs_comm_kind(const qs_comm *c) { return c && c->mpi ? "mpi" : "single"; }

qs_status qs_comm_allreduce_sum_f32_direct(qs_comm *c, float *buf, int64_t n) {
    if (!c->mpi || c->world == 1) return QS_OK;
    for (int64_t off = 0; off < n; off += INT_MAX) {
        int cnt = (int)(n - off < INT_MAX ? n - off : INT_MAX);
        QS_TRY(qs_mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "Allreduce"));
    }
    return QS_OK;
}

/* Complete a started request, polling with heartbeats; `what` names it in a timeout error. */
static qs_status wait_request(qs_comm *c, MPI_Request *rq, const char *what, double timeout_s) {
    const double t0 = qs_now_ms();
    for (;;) {
        int flag = 0;
        QS_TRY(qs_mpi_check(MPI_Test(rq, &flag, MPI_STATUS_IGNORE), "Test"));
        if (flag) return QS_OK;
        qs_comm_heartbeat(c);
        if (timeout_s > 0 && qs_now_ms() - t0 > 1e3 * timeout_s) return qs_comm_timeout_error(c, what, timeout_s);
    }
}

/* A blocking reduction through the non-blocking one, so it obeys the timeout. */
static qs_status small_allreduce(qs_comm *c, void *buf, int n, MPI_Datatype t, MPI_Op op, double timeout_s) {
    if (!c->mpi || c->world == 1) return QS_OK;
    MPI_Request rq;
    QS_TRY(qs_mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf, n, t, op, MPI_COMM_WORLD, &rq), "Iallreduce"));
    return wait_request(c, &rq, "a reduction", timeout_s);
}

qs_status qs_comm_bcast_bytes(qs_comm *c, int root, char **buf, size_t *n, double timeout_s) {
    if (!c || !c->mpi || c->world == 1) return QS_OK;
    if (root < 0 || root >= c->world)
        return QS_FAIL(QS_ERR_INVALID_ARG, "broadcast from rank %d in a job of %d ranks", root, c->world);
    uint64_t len = c->rank == root ? (uint64_t)*n : 0;
    MPI_Request rq;
    QS_TRY(qs_mpi_check(MPI_Ibcast(&len, 1, MPI_UINT64_T, root, MPI_COMM_WORLD, &rq), "Ibcast"));
    QS_TRY(wait_request(c, &rq, "a broadcast", timeout_s));
    if (len > (uint64_t)INT_MAX) return QS_FAIL(QS_ERR_UNSUPPORTED, "broadcast of %llu bytes is too large", (unsigned long long)len);
    if (c->rank != root) {
        *buf = malloc((size_t)len + 1);
        if (!*buf) return QS_FAIL(QS_ERR_OOM, "out of memory receiving a broadcast of %llu bytes", (unsigned long long)len);
        (*buf)[len] = '\0';
        *n = (size_t)len;
    }
    if (len == 0) return QS_OK;
    QS_TRY(qs_mpi_check(MPI_Ibcast(*buf, (int)len, MPI_BYTE, root, MPI_COMM_WORLD, &rq), "Ibcast"));
    return wait_request(c, &rq, "a broadcast", timeout_s);
}

qs_status qs_comm_allreduce_sum_f64(qs_comm *c, double *buf, int n, double timeout_s) {
    return small_allreduce(c, buf, n, MPI_DOUBLE, MPI_SUM, timeout_s);
}

qs_status qs_comm_allreduce_minmax_u64(qs_comm *c, uint64_t v, uint64_t *min, uint64_t *max, double timeout_s) {
    uint64_t lo = v, hi = v;
    QS_TRY(small_allreduce(c, &lo, 1, MPI_UINT64_T, MPI_MIN, timeout_s));
    QS_TRY(small_allreduce(c, &hi, 1, MPI_UINT64_T, MPI_MAX, timeout_s));
    *min = lo;
    *max = hi;
    return QS_OK;
}
