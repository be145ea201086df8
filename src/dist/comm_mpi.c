/* src/dist/comm_mpi.c — the process group on Open MPI (see comm.h); the only file that calls MPI. */
#include "dist/comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"

struct qs_comm {
    bool mpi;
    int rank, world;
    MPI_Request reqs[QS_COMM_MAX_REQS][4]; /* a reduction of > INT_MAX floats is split */
    int nparts[QS_COMM_MAX_REQS];
    bool used[QS_COMM_MAX_REQS];
};

/* Open MPI's launcher exports the world size to every rank it starts. */
static bool launched_by_mpirun(void) { return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK"); }

static qs_status mpi_check(int rc, const char *what) {
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
        qs_status st = mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "initialisation");
        if (st != QS_OK) {
            free(c);
            return st;
        }
        c->mpi = true;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &c->world);
    }
    *out = c;
    return QS_OK;
}

void qs_comm_finalize(qs_comm *c) {
    if (!c) return;
    if (c->mpi) MPI_Finalize();
    free(c);
}

void qs_comm_abort(qs_comm *c, int code) {
    if (c && c->mpi) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

int qs_comm_rank(const qs_comm *c) { return c ? c->rank : 0; }
int qs_comm_world(const qs_comm *c) { return c ? c->world : 1; }
const char *qs_comm_kind(const qs_comm *c) { return c && c->mpi ? "mpi" : "single"; }

qs_status qs_comm_iallreduce_sum_f32(qs_comm *c, float *buf, int64_t n, int *req) {
    *req = -1;
    int r = 0;
    while (r < QS_COMM_MAX_REQS && c->used[r]) r++;
    if (r == QS_COMM_MAX_REQS)
        return QS_FAIL(QS_ERR_INTERNAL, "allreduce: more than %d reductions outstanding", QS_COMM_MAX_REQS);
    c->used[r] = true;
    c->nparts[r] = 0;
    *req = r;
    if (!c->mpi || c->world == 1) return QS_OK;
    for (int64_t off = 0; off < n; off += INT_MAX) {
        if (c->nparts[r] == 4) return QS_FAIL(QS_ERR_UNSUPPORTED, "allreduce of %lld floats is too large", (long long)n);
        int cnt = (int)(n - off < INT_MAX ? n - off : INT_MAX);
        QS_TRY(mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                        &c->reqs[r][c->nparts[r]]),
                         "Iallreduce"));
        c->nparts[r]++;
    }
    return QS_OK;
}

qs_status qs_comm_test(qs_comm *c, int req, bool *done) {
    if (req < 0 || req >= QS_COMM_MAX_REQS || !c->used[req])
        return QS_FAIL(QS_ERR_INTERNAL, "allreduce test: request %d is not outstanding", req);
    int flag = 1;
    if (c->nparts[req] > 0)
        QS_TRY(mpi_check(MPI_Testall(c->nparts[req], c->reqs[req], &flag, MPI_STATUSES_IGNORE), "Testall"));
    *done = flag != 0;
    if (*done) c->used[req] = false;
    return QS_OK;
}

qs_status qs_comm_wait(qs_comm *c, int req, double timeout_s) {
    const double t0 = qs_now_ms();
    for (;;) {
        bool done;
        QS_TRY(qs_comm_test(c, req, &done));
        if (done) return QS_OK;
        if (timeout_s > 0 && qs_now_ms() - t0 > 1e3 * timeout_s)
            return QS_FAIL(QS_ERR_TIMEOUT,
                           "rank %d of %d: a gradient all-reduce did not complete within %g s: another rank stalled "
                           "or died (raise --collective-timeout if steps are really this slow)",
                           c->rank, c->world, timeout_s);
    }
}

qs_status qs_comm_allreduce_sum_f32_direct(qs_comm *c, float *buf, int64_t n) {
    if (!c->mpi || c->world == 1) return QS_OK;
    for (int64_t off = 0; off < n; off += INT_MAX) {
        int cnt = (int)(n - off < INT_MAX ? n - off : INT_MAX);
        QS_TRY(mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "Allreduce"));
    }
    return QS_OK;
}

/* A blocking reduction through the non-blocking one, so it obeys the timeout. */
static qs_status small_allreduce(qs_comm *c, void *buf, int n, MPI_Datatype t, MPI_Op op, double timeout_s) {
    if (!c->mpi || c->world == 1) return QS_OK;
    MPI_Request rq;
    QS_TRY(mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf, n, t, op, MPI_COMM_WORLD, &rq), "Iallreduce"));
    const double t0 = qs_now_ms();
    for (;;) {
        int flag = 0;
        QS_TRY(mpi_check(MPI_Test(&rq, &flag, MPI_STATUS_IGNORE), "Test"));
        if (flag) return QS_OK;
        if (timeout_s > 0 && qs_now_ms() - t0 > 1e3 * timeout_s)
            return QS_FAIL(QS_ERR_TIMEOUT,
                           "rank %d of %d: a reduction did not complete within %g s: another rank stalled or died",
                           c->rank, c->world, timeout_s);
    }
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
