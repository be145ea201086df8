/* tests/test_comm.c — the communication interface (src/parallel/coll.h) on the mpi transport:
 * every collective against references each rank computes (tests/support/coll_check.h) in a
 * group of one and under the real launcher on 2 and 3 ranks (3 on 2 cores, oversubscribed);
 * a receive cancelled without breaking the communicator; a rank stopped (SIGSTOP) before a
 * collective, named by the other's timeout, after which the communicator refuses new work;
 * and the transports refused on host buffers. The multi-rank parts launch this program again
 * under mpirun, where main runs one rank's part (argv[1]: "checks" or "stall"). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "coll_check.h"
#include "dist_run.h"
#include "parallel/coll.h"
#include "parallel/comm.h"
#include "run_cmd.h"

/* A communicator on host buffers (the transport QS_COLL_AUTO picks without a backend). */
static qs_coll *host_coll(qs_comm *comm) {
    const qs_coll_options o = {.transport = QS_COLL_AUTO, .timeout_s = 60};
    qs_coll *c = NULL;
    if (qs_coll_open(comm, &o, &c) != QS_OK) {
        printf("rank %d: FAIL open: %s\n", qs_comm_rank(comm), qs_last_error());
        return NULL;
    }
    return c;
}

/* Rank 0 posts a receive rank 1 never matches, cancels it; then one all-reduce still works. */
static int cancelled_recv(qs_coll *c, int rank, int world) {
    float x[4] = {1, 2, 3, (float)rank}, y[4];
    int req = -1;
    bool done = true;
    if (rank == 0 && (qs_coll_recv(c, y, 4, QS_F32, 1, NULL, &req) != QS_OK || qs_coll_test(c, req, &done) != QS_OK ||
                      done)) {
        printf("rank 0: FAIL a receive nobody sends to (%s)\n", qs_last_error());
        return 1;
    }
    if (rank == 0) qs_coll_cancel(c, req);
    if (qs_coll_allreduce(c, x, 4, QS_F32, NULL, &req) != QS_OK || qs_coll_wait(c, req, 60) != QS_OK ||
        x[0] != (float)world || x[3] != (float)(world * (world - 1) / 2)) {
        printf("rank %d: FAIL an all-reduce after a cancelled receive (%s)\n", rank, qs_last_error());
        return 1;
    }
    return 0;
}

/* One rank's part of "checks": every collective, then the cancelled receive. */
static int rank_checks(qs_comm *comm) {
    qs_coll *c = host_coll(comm);
    if (!c) return 1;
    int checks = 0;
    int fails = qs_test_coll_checks(c, NULL, &checks);
    fails += cancelled_recv(c, qs_comm_rank(comm), qs_comm_world(comm));
    printf("rank %d of %d: %d checks on the %s transport, %d failed\n", qs_comm_rank(comm), qs_comm_world(comm),
           checks + 1, qs_coll_transport_name(qs_coll_transport_of(c)), fails);
    qs_coll_close(c);
    return fails ? 1 : 0;
}

/* One rank's part of "stall": rank 1 stops itself before an all-reduce; rank 0's wait must time
 * out naming it, and the communicator refuse what follows; then rank 0 ends the job. */
static int rank_stall(qs_comm *comm) {
    qs_coll *c = host_coll(comm);
    if (!c) return 1;
    const int rank = qs_comm_rank(comm);
    if (qs_comm_arrive(comm, 1, 0) != QS_OK) return 1;
    if (rank == 1) raise(SIGSTOP);
    float x[16] = {0};
    int req = -1;
    qs_status st = qs_coll_allreduce(c, x, 16, QS_F32, NULL, &req);
    if (st == QS_OK) st = qs_coll_wait(c, req, 3);
    printf("rank %d: wait: %s: %s\n", rank, qs_status_name(st), qs_last_error());
    st = qs_coll_allreduce(c, x, 16, QS_F32, NULL, &req);
    printf("rank %d: after the timeout: %s: %s\n", rank, qs_status_name(st), qs_last_error());
    fflush(stdout);
    qs_comm_abort(comm, 3);
    return 1;
}

/* In a group of one (no launcher): every collective, and the device transports refused on host
 * buffers. */
static void test_group_of_one(void **state) {
    (void)state;
    qs_comm *comm = NULL;
    assert_int_equal(qs_comm_init(NULL, NULL, &comm), QS_OK);
    assert_string_equal(qs_comm_kind(comm), "single");
    qs_coll *c = host_coll(comm);
    assert_non_null(c);
    assert_int_equal(qs_coll_transport_of(c), QS_COLL_MPI);
    int checks = 0;
    const int fails = qs_test_coll_checks(c, NULL, &checks);
    printf("  group of one: %d checks, %d failed\n", checks, fails);
    assert_int_equal(fails, 0);
    qs_coll_close(c);
    static const qs_coll_transport gpu[] = {QS_COLL_IPC, QS_COLL_NCCL};
    for (int k = 0; k < 2; k++) {
        const qs_coll_options o = {.transport = gpu[k], .timeout_s = 5};
        assert_int_equal(qs_coll_open(comm, &o, &c), QS_ERR_INVALID_ARG);
        assert_null(c);
        assert_non_null(strstr(qs_last_error(), "needs buffers of the CUDA backend"));
    }
    qs_comm_finalize(comm);
}

/* Every collective on 2 and 3 ranks; each rank reports its checks and none may fail. */
static void test_ranks(void **state) {
    (void)state;
    qs_test_expect_self_ranks(2, "checks");
    qs_test_expect_self_ranks(3, "checks");
}

/* A stopped rank: rank 0's wait ends in QS_ERR_TIMEOUT naming rank 1, then the communicator is
 * out of step and says so. */
static void test_stalled_rank(void **state) {
    (void)state;
    char *out = NULL;
    const int rc = qs_test_run_self_ranks(2, "stall", &out);
    printf("%s", out ? out : "");
    if (rc == 0 || rc == 124 || !out || !strstr(out, "rank 0: wait: QS_ERR_TIMEOUT") ||
        !strstr(out, "rank 1 (silent for") || !strstr(out, "an all-reduce of 16 elements (mpi) did not complete") ||
        !strstr(out, "rank 0: after the timeout: QS_ERR_BACKEND") || !strstr(out, "out of step"))
        fail_msg("exit %d; wanted a timeout naming rank 1 and a refusal after it", rc);
    free(out);
}

int main(int argc, char **argv) {
    if (getenv("OMPI_COMM_WORLD_SIZE")) {
        qs_comm *comm = NULL;
        if (qs_comm_init(&argc, &argv, &comm) != QS_OK) {
            printf("FAIL init: %s\n", qs_last_error());
            return 1;
        }
        const int rc = argc > 1 && strcmp(argv[1], "stall") == 0 ? rank_stall(comm) : rank_checks(comm);
        qs_comm_finalize(comm);
        return rc;
    }
    qs_test_mpi_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_of_one),
        cmocka_unit_test(test_ranks),
        cmocka_unit_test(test_stalled_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
