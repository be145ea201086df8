/* tests/test_replica_check.c — the replica check (qs_grad_sync_check_replicas) finds replicas
 * that differ. The test launches this binary again under the real launcher (`mpirun -np 2`);
 * there both ranks set up the same mlp (80 MB of parameters: two of the check's 64 MiB chunks)
 * with the same weights, the check passes; then rank 1 flips one bit of its parameters — in
 * the first byte, in the first chunk's last word, and in the last byte — and the check must
 * fail on both ranks naming the step, and pass again once the bit is back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backends.h"
#include "parallel/grad_sync.h"
#include "models/models.h"
#include "io/plan_file.h"
#include "run_cmd.h"

/* The mlp (width 4096) on the CPU at batch 1, every parameter set from its index. */
static qs_status ranks_model(qs_backend *be, qs_model **out) {
    qs_model_options mo = qs_models_default_options(28, 28, 1, 10);
    mo.width = 4096;
    QS_TRY(qs_models_build("mlp", &mo, out));
    qs_model *m = *out;
    qs_model_fuse(m);
    qs_precision_options po;
    qs_precision_options_default(&po);
    QS_TRY(qs_precision_setup(m, be, &po));
    QS_TRY(qs_model_setup(m, be, 1, 1));
    float *p = m->param_data;
    for (size_t i = 0; i < m->params.bytes / sizeof(float); i++) p[i] = (float)(i % 1000) * 1e-3f - 0.5f;
    return QS_OK;
}

/* Under mpirun: the checks, one line per rank; 0 when every expectation held. */
static int ranks_body(int argc, char **argv) {
    qs_comm *comm = NULL;
    qs_backend *be = NULL;
    qs_model *m = NULL;
    qs_grad_sync gs;
    if (qs_comm_init(&argc, &argv, &comm) != QS_OK || qs_backend_cpu_create(1, &be) != QS_OK ||
        ranks_model(be, &m) != QS_OK || qs_grad_sync_init(&gs, comm, m, 25 << 20, true, 60) != QS_OK) {
        fprintf(stderr, "set-up failed: %s\n", qs_last_error());
        return 1;
    }
    const int rank = qs_comm_rank(comm);
    unsigned char *bytes = m->param_data;
    const size_t n = m->params.bytes, at[3] = {0, ((size_t)64 << 20) - 1, n - 1};
    int bad = 0;
    if (qs_grad_sync_check_replicas(&gs, 1) != QS_OK) {
        fprintf(stderr, "rank %d: equal replicas reported as different: %s\n", rank, qs_last_error());
        bad++;
    }
    for (int k = 0; k < 3; k++) {
        if (rank == 1) bytes[at[k]] ^= 0x10;
        qs_status st = qs_grad_sync_check_replicas(&gs, 2 + k);
        char want[64];
        snprintf(want, sizeof want, "after step %d the replicas' parameters differ", 2 + k);
        if (st != QS_ERR_MISMATCH || !strstr(qs_last_error(), want)) {
            fprintf(stderr, "rank %d: a bit flipped at byte %zu of %zu was not reported (status %d, \"%s\")\n", rank,
                    at[k], n, (int)st, st == QS_OK ? "" : qs_last_error());
            bad++;
        } else {
            printf("rank %d: bit flipped at byte %zu of %zu: %s\n", rank, at[k], n, qs_last_error());
        }
        if (rank == 1) bytes[at[k]] ^= 0x10;
        if (qs_grad_sync_check_replicas(&gs, 10 + k) != QS_OK) {
            fprintf(stderr, "rank %d: replicas equal again but reported as different\n", rank);
            bad++;
        }
    }
    qs_grad_sync_free(&gs);
    qs_model_free(m);
    be->ops->destroy(be);
    qs_comm_finalize(comm);
    return bad ? 1 : 0;
}

/* Launch this binary on 2 ranks; both must report every flipped bit. */
static void test_replica_check_finds_a_flipped_bit(void **state) {
    (void)state;
    char self[1024], cmd[1200];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(len > 0);
    self[len] = '\0';
    snprintf(cmd, sizeof cmd, "timeout 300 mpirun -np 2 --oversubscribe %s", self);
    char *out = NULL;
    int rc = qs_test_run_shell(cmd, &out);
    int reports = 0;
    for (const char *p = out; p && (p = strstr(p, "replicas' parameters differ")); p++) reports++;
    printf("%s", out ? out : "");
    if (rc != 0 || reports != 6) fail_msg("%s: exit %d, %d of 6 reports", cmd, rc, reports);
    free(out);
}

int main(int argc, char **argv) {
    if (getenv("OMPI_COMM_WORLD_SIZE")) return ranks_body(argc, argv);
    qs_test_mpi_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replica_check_finds_a_flipped_bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
