/* tests/support/coll_check.c — see coll_check.h. */
#include "coll_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qsync/tensor.h"

#define QS_CK_ARENA ((size_t)4 << 20)
#define QS_CK_TIMEOUT_S 60

typedef struct ck {
    qs_coll *c;
    qs_backend *be; /* NULL: host buffers */
    qs_coll_transport t;
    int rank, world;
    char *arena;    /* registered, where every check's buffers are carved (the same offsets on every rank) */
    size_t used;
    int fails, checks;
} ck;

/* Count a check; print a failure with the library's last message. */
static void ck_expect(ck *k, bool ok, const char *what) {
    k->checks++;
    if (ok) return;
    k->fails++;
    printf("rank %d: FAIL %s (%s transport; last error: %s)\n", k->rank, what, qs_coll_transport_name(k->t),
           qs_last_error());
}

/* The next 256-byte aligned piece of the arena (reset by each check). */
static void *ck_take(ck *k, size_t bytes) {
    void *p = k->arena + k->used;
    k->used += (bytes + 255) & ~(size_t)255;
    if (k->used > QS_CK_ARENA) {
        printf("rank %d: FAIL the check arena is too small\n", k->rank);
        abort();
    }
    return p;
}

/* Host bytes into the arena (put) or back (get): device memory through the backend's default
 * stream, synchronized. */
static void ck_copy(ck *k, void *dst, const void *src, size_t n, bool put) {
    if (!k->be) {
        memcpy(dst, src, n);
        return;
    }
    qs_stream *s = k->be->ops->default_stream(k->be);
    const qs_status st = put ? k->be->ops->copy_h2d(k->be, s, dst, src, n) : k->be->ops->copy_d2h(k->be, s, dst, src, n);
    if (st != QS_OK || k->be->ops->stream_sync(k->be, s) != QS_OK) abort();
}
#define ck_put(k, dst, src, n) ck_copy((k), (dst), (src), (n), true)
#define ck_get(k, dst, src, n) ck_copy((k), (dst), (src), (n), false)

/* Rank r's element i of input `tag`: a small integer, so every sum is exact in FP32. */
static float ck_val(int r, int64_t i, int tag) { return (float)((r * 31 + i * 7 + tag * 13) % 97) - 48.0f; }

/* Complete a started collective (st its start's status, *req its handle: read after the start). */
static bool ck_done(ck *k, qs_status st, const int *req) {
    return st == QS_OK && qs_coll_wait(k->c, *req, QS_CK_TIMEOUT_S) == QS_OK;
}

/* A sum of n floats; frac: fractions summed in rank order, compared bit for bit (ipc). */
static void ck_allreduce(ck *k, int64_t n, bool frac) {
    float *h = calloc((size_t)n + 1, sizeof *h), *want = calloc((size_t)n + 1, sizeof *want);
    for (int64_t i = 0; i < n; i++) {
        h[i] = frac ? ck_val(k->rank, i, 1) * 0.37f + 1e-3f * (float)k->rank : ck_val(k->rank, i, 1);
        want[i] = frac ? ck_val(0, i, 1) * 0.37f : ck_val(0, i, 1);
        for (int p = 1; p < k->world; p++) want[i] += frac ? ck_val(p, i, 1) * 0.37f + 1e-3f * (float)p : ck_val(p, i, 1);
    }
    k->used = 0;
    float *d = ck_take(k, (size_t)n * sizeof *d);
    ck_put(k, d, h, (size_t)n * sizeof *h);
    int req = -1;
    bool ok = ck_done(k, qs_coll_allreduce(k->c, d, n, QS_F32, NULL, &req), &req);
    ck_get(k, h, d, (size_t)n * sizeof *h);
    char what[96];
    snprintf(what, sizeof what, "all-reduce of %lld floats%s", (long long)n, frac ? " (fractions, rank order)" : "");
    ck_expect(k, ok && memcmp(h, want, (size_t)n * sizeof *h) == 0, what);
    free(h);
    free(want);
}

/* Three all-reduces in flight at once, waited for in reverse order. */
static void ck_inflight(ck *k) {
    enum { N = 257, M = 3 };
    float h[M][N], *d[M];
    int req[M];
    bool ok = true;
    k->used = 0;
    for (int m = 0; m < M; m++) {
        for (int i = 0; i < N; i++) h[m][i] = ck_val(k->rank, i, 2 + m);
        d[m] = ck_take(k, sizeof h[m]);
        ck_put(k, d[m], h[m], sizeof h[m]);
        ok = ok && qs_coll_allreduce(k->c, d[m], N, QS_F32, NULL, &req[m]) == QS_OK;
    }
    for (int m = M - 1; m >= 0 && ok; m--) ok = qs_coll_wait(k->c, req[m], QS_CK_TIMEOUT_S) == QS_OK;
    for (int m = 0; m < M && ok; m++) {
        ck_get(k, h[m], d[m], sizeof h[m]);
        for (int i = 0; i < N; i++) {
            float want = 0;
            for (int p = 0; p < k->world; p++) want += ck_val(p, i, 2 + m);
            ok = ok && h[m][i] == want;
        }
    }
    ck_expect(k, ok, "three all-reduces in flight, waited for in reverse order");
}

/* A sum of s32 and of i64 (refused by ipc, which sums f32 only). */
static void ck_allreduce_ints(ck *k) {
    enum { N = 100 };
    int32_t a[N];
    int64_t b[N];
    for (int i = 0; i < N; i++) {
        a[i] = (int32_t)(k->rank * 1000 + i);
        b[i] = (int64_t)(k->rank + 1) << 40 | i;
    }
    k->used = 0;
    void *da = ck_take(k, sizeof a), *db = ck_take(k, sizeof b);
    ck_put(k, da, a, sizeof a);
    ck_put(k, db, b, sizeof b);
    int ra = -1, rb = -1;
    const qs_status sa = qs_coll_allreduce(k->c, da, N, QS_S32, NULL, &ra);
    if (k->t == QS_COLL_IPC) {
        ck_expect(k, sa == QS_ERR_UNSUPPORTED && strstr(qs_last_error(), "ipc") && strstr(qs_last_error(), "all-reduce"),
                  "ipc refuses an all-reduce of s32");
        return;
    }
    bool ok = ck_done(k, sa, &ra) && ck_done(k, qs_coll_allreduce(k->c, db, N, QS_I64, NULL, &rb), &rb);
    ck_get(k, a, da, sizeof a);
    ck_get(k, b, db, sizeof b);
    for (int i = 0; i < N && ok; i++) {
        int64_t wa = 0, wb = 0;
        for (int p = 0; p < k->world; p++) {
            wa += p * 1000 + i;
            wb += (int64_t)(p + 1) << 40 | i;
        }
        ok = a[i] == wa && b[i] == wb;
    }
    ck_expect(k, ok, "all-reduce of s32 and of i64");
}

/* Reduce-scatter: equal pieces (counts NULL: `count` each) or per-rank ones. */
static void ck_reduce_scatter(ck *k, const int64_t *counts, int64_t count) {
    int64_t total = 0, mine = counts ? counts[k->rank] : count, at = 0;
    for (int p = 0; p < k->world; p++) {
        if (p < k->rank) at += counts ? counts[p] : count;
        total += counts ? counts[p] : count;
    }
    float *h = calloc((size_t)total + 1, sizeof *h), *got = calloc((size_t)mine + 1, sizeof *got);
    for (int64_t j = 0; j < total; j++) h[j] = ck_val(k->rank, j, 5);
    k->used = 0;
    float *send = ck_take(k, (size_t)total * sizeof *send), *recv = ck_take(k, (size_t)mine * sizeof *recv);
    ck_put(k, send, h, (size_t)total * sizeof *h);
    int req = -1;
    const qs_status st = counts ? qs_coll_reduce_scatterv(k->c, send, recv, counts, QS_F32, NULL, &req)
                                : qs_coll_reduce_scatter(k->c, send, recv, count, QS_F32, NULL, &req);
    bool ok = ck_done(k, st, &req);
    ck_get(k, got, recv, (size_t)mine * sizeof *got);
    for (int64_t i = 0; i < mine && ok; i++) {
        float want = 0;
        for (int p = 0; p < k->world; p++) want += ck_val(p, at + i, 5);
        ok = got[i] == want;
    }
    ck_expect(k, ok, counts ? "reduce-scatter with per-rank pieces (one empty)" : "reduce-scatter with equal pieces");
    free(h);
    free(got);
}

/* All-gather: equal or per-rank pieces, in place or from a buffer of its own. */
static void ck_allgather(ck *k, const int64_t *counts, int64_t count, bool in_place) {
    int64_t total = 0, at = 0, displ[64];
    for (int p = 0; p < k->world; p++) {
        displ[p] = total;
        total += counts ? counts[p] : count;
    }
    at = displ[k->rank];
    const int64_t mine = counts ? counts[k->rank] : count;
    float *h = calloc((size_t)total + 1, sizeof *h);
    for (int64_t i = 0; i < mine; i++) h[i] = ck_val(k->rank, i, 6);
    k->used = 0;
    float *recv = ck_take(k, (size_t)total * sizeof *recv);
    float *send = in_place ? recv + at : ck_take(k, (size_t)mine * sizeof *send);
    ck_put(k, send, h, (size_t)mine * sizeof *h);
    int req = -1;
    const qs_status st = counts ? qs_coll_allgatherv(k->c, send, recv, counts, QS_F32, NULL, &req)
                                : qs_coll_allgather(k->c, send, recv, count, QS_F32, NULL, &req);
    bool ok = ck_done(k, st, &req);
    ck_get(k, h, recv, (size_t)total * sizeof *h);
    for (int p = 0; p < k->world && ok; p++)
        for (int64_t i = 0; i < (counts ? counts[p] : count) && ok; i++) ok = h[displ[p] + i] == ck_val(p, i, 6);
    char what[96];
    snprintf(what, sizeof what, "all-gather with %s pieces%s", counts ? "per-rank" : "equal", in_place ? ", in place" : "");
    ck_expect(k, ok, what);
    free(h);
}

static unsigned char ck_byte(int r, int64_t j) { return (unsigned char)((r * 37 + j * 11) & 0xff); }

/* All-to-all of count bytes per piece (u8). */
static void ck_alltoall(ck *k, int64_t count) {
    const size_t n = (size_t)k->world * (size_t)count;
    unsigned char *h = calloc(n + 1, 1);
    for (size_t j = 0; j < n; j++) h[j] = ck_byte(k->rank, (int64_t)j);
    k->used = 0;
    unsigned char *send = ck_take(k, n), *recv = ck_take(k, n);
    ck_put(k, send, h, n);
    int req = -1;
    bool ok = ck_done(k, qs_coll_alltoall(k->c, send, recv, count, QS_U8, NULL, &req), &req);
    ck_get(k, h, recv, n);
    for (int p = 0; p < k->world && ok; p++)
        for (int64_t i = 0; i < count && ok; i++) ok = h[p * count + i] == ck_byte(p, k->rank * count + i);
    ck_expect(k, ok, "all-to-all of bytes");
    free(h);
}

/* Point to point: rank 0 sends to rank 1 (send and recv), then an exchange around the ring
 * (send-recv); ipc refuses both. */
static void ck_p2p(ck *k) {
    enum { N = 300 };
    float h[N], got[N];
    for (int i = 0; i < N; i++) h[i] = ck_val(k->rank, i, 8);
    k->used = 0;
    float *send = ck_take(k, sizeof h), *recv = ck_take(k, sizeof h);
    ck_put(k, send, h, sizeof h);
    int req = -1;
    if (k->t == QS_COLL_IPC) {
        const qs_status st = qs_coll_send(k->c, send, N, QS_F32, (k->rank + 1) % k->world, NULL, &req);
        ck_expect(k, st == QS_ERR_UNSUPPORTED && strstr(qs_last_error(), "ipc") && strstr(qs_last_error(), "send"),
                  "ipc refuses a send");
        return;
    }
    bool ok = true;
    if (k->rank == 0) ok = ck_done(k, qs_coll_send(k->c, send, N, QS_F32, 1, NULL, &req), &req);
    if (k->rank == 1) ok = ck_done(k, qs_coll_recv(k->c, recv, N, QS_F32, 0, NULL, &req), &req);
    if (k->rank == 1) ck_get(k, got, recv, sizeof got);
    for (int i = 0; k->rank == 1 && ok && i < N; i++) ok = got[i] == ck_val(0, i, 8);
    ck_expect(k, ok, "send from rank 0, recv on rank 1");
    const int to = (k->rank + 1) % k->world, from = (k->rank + k->world - 1) % k->world;
    ok = ck_done(k, qs_coll_sendrecv(k->c, send, to, recv, from, N, QS_F32, NULL, &req), &req);
    ck_get(k, got, recv, sizeof got);
    for (int i = 0; ok && i < N; i++) ok = got[i] == ck_val(from, i, 8);
    ck_expect(k, ok, "send-recv around the ring");
}

/* Refusals every transport makes the same way, and the dtype refusals of each. */
static void ck_refusals(ck *k) {
    k->used = 0;
    float *a = ck_take(k, 1024 * sizeof(float));
    int req = 0;
    qs_status st = qs_coll_reduce_scatter(k->c, a, a + 1, 4, QS_F32, NULL, &req);
    ck_expect(k, st == QS_ERR_INVALID_ARG && req == -1 && strstr(qs_last_error(), "overlap"),
              "a reduce-scatter into its own send buffer is refused");
    st = qs_coll_allreduce(k->c, a, -1, QS_F32, NULL, &req);
    ck_expect(k, st == QS_ERR_INVALID_ARG, "an all-reduce of -1 elements is refused");
    st = qs_coll_allreduce(k->c, a, 4, (qs_dtype)99, NULL, &req);
    ck_expect(k, st == QS_ERR_INVALID_ARG && strstr(qs_last_error(), "dtype"), "an unknown dtype is refused");
    st = qs_coll_send(k->c, a, 4, QS_F32, k->rank, NULL, &req);
    ck_expect(k, st == QS_ERR_INVALID_ARG, "a send to this rank itself is refused");
    st = qs_coll_test(k->c, 12345, &(bool){false});
    ck_expect(k, st == QS_ERR_INTERNAL, "a test of a handle never handed out is refused");
    const qs_dtype no_sum = k->t == QS_COLL_NCCL ? QS_U8 : QS_BF16;
    st = qs_coll_allreduce(k->c, a, 4, no_sum, NULL, &req);
    ck_expect(k, st == QS_ERR_UNSUPPORTED && strstr(qs_last_error(), qs_coll_transport_name(k->t)) &&
                     strstr(qs_last_error(), qs_dtype_name(no_sum)) && strstr(qs_last_error(), "all-reduce"),
              "an all-reduce of a dtype the transport does not sum is refused, naming both");
}

int qs_test_coll_checks(qs_coll *c, qs_backend *be, int *checks) {
    ck k = {.c = c, .be = be, .t = qs_coll_transport_of(c)};
    k.rank = qs_comm_rank(qs_coll_comm(c));
    k.world = qs_comm_world(qs_coll_comm(c));
    if (be && be->ops->alloc(be, QS_CK_ARENA, (void **)&k.arena) != QS_OK) abort();
    if (!be) k.arena = qs_host_alloc(QS_CK_ARENA);
    if (!k.arena || qs_coll_register(c, k.arena, QS_CK_ARENA) != QS_OK) {
        printf("rank %d: FAIL set-up: %s\n", k.rank, qs_last_error());
        abort();
    }
    static const int64_t lengths[] = {1031, 1, 0, 65536 + 3};
    for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) ck_allreduce(&k, lengths[i], false);
    if (k.t == QS_COLL_IPC) ck_allreduce(&k, 4099, true);
    ck_inflight(&k);
    ck_allreduce_ints(&k);
    int64_t counts[64];
    for (int p = 0; p < k.world; p++) counts[p] = p == 1 ? 0 : 5 + 3 * p; /* rank 1's piece empty */
    ck_reduce_scatter(&k, NULL, 37);
    ck_reduce_scatter(&k, counts, 0);
    ck_reduce_scatter(&k, NULL, 0);
    for (int in_place = 0; in_place < 2; in_place++) {
        ck_allgather(&k, NULL, 29, in_place);
        ck_allgather(&k, counts, 0, in_place);
    }
    ck_alltoall(&k, 13);
    if (k.world > 1) ck_p2p(&k);
    ck_refusals(&k);
    if (be) be->ops->free(be, k.arena);
    else qs_host_free(k.arena);
    *checks = k.checks;
    return k.fails;
}
