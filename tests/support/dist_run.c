/* tests/support/dist_run.c — see dist_run.h. */
#include "dist_run.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "run_cmd.h"
#include "io/safetensors.h"

void qs_test_ranks_command(int n, const char *args, char *cmd, size_t cap) {
    const char *bin = getenv("QS_BIN");
    assert_non_null(bin);
    if (n > 0) snprintf(cmd, cap, "mpirun -np %d --oversubscribe -x LD_LIBRARY_PATH %s %s", n, bin, args);
    else snprintf(cmd, cap, "%s %s", bin, args);
}

int qs_test_run_ranks(int n, const char *args, int want, const char *needle) {
    char cmd[4096];
    qs_test_ranks_command(n, args, cmd, sizeof cmd);
    char *out = NULL;
    int rc = qs_test_run_shell(cmd, &out);
    bool ok = want == -2 ? rc != 0 : rc == want;
    if (!ok || (needle && !strstr(out, needle)))
        fail_msg("%s\n  exit %d (want %d), output:\n%s\n  (wanted: %s)", cmd, rc, want, out, needle ? needle : "-");
    free(out);
    return rc;
}

void qs_test_run_ranks_output(int n, const char *args, char **out) {
    char cmd[4096];
    qs_test_ranks_command(n, args, cmd, sizeof cmd);
    int rc = qs_test_run_shell(cmd, out);
    if (rc != 0) fail_msg("%s\n  exit %d, output:\n%s", cmd, rc, *out);
}

int qs_test_run_self_ranks(int n, const char *args, char **out) {
    char self[1024], cmd[2048];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(len > 0);
    self[len] = '\0';
    snprintf(cmd, sizeof cmd, "timeout 300 mpirun -np %d --oversubscribe %s%s %s", n,
             getenv("LD_LIBRARY_PATH") ? "-x LD_LIBRARY_PATH " : "", self, args);
    return qs_test_run_shell(cmd, out);
}

void qs_test_expect_self_ranks(int n, const char *args) {
    char *out = NULL;
    const int rc = qs_test_run_self_ranks(n, args, &out);
    int clean = 0;
    for (const char *p = out; p && (p = strstr(p, " failed\n")); p++) clean += p - out >= 2 && p[-1] == '0' && p[-2] == ' ';
    printf("%s", out ? out : "");
    if (rc != 0 || clean != n) fail_msg("%d ranks (%s): exit %d, %d of %d ranks without failures", n, args, rc, clean, n);
    free(out);
}

double qs_test_checkpoint_max_rel_diff(const char *dir_a, const char *dir_b) {
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/model.safetensors", dir_a);
    snprintf(pb, sizeof pb, "%s/model.safetensors", dir_b);
    qs_st_file *fa = NULL, *fb = NULL;
    assert_int_equal(qs_safetensors_open(pa, &fa), QS_OK);
    assert_int_equal(qs_safetensors_open(pb, &fb), QS_OK);
    double worst = 0;
    for (int i = 0; i < qs_safetensors_count(fa); i++) {
        qs_st_tensor ta, tb;
        const char *name = qs_safetensors_name_at(fa, i);
        assert_int_equal(qs_safetensors_get(fa, name, &ta), QS_OK);
        assert_int_equal(qs_safetensors_get(fb, name, &tb), QS_OK);
        if (ta.dtype != QS_F32) continue;
        int64_t n = 1;
        for (int d = 0; d < ta.ndim; d++) n *= ta.shape[d];
        const float *a = ta.data, *b = tb.data;
        double amax = 0, dmax = 0;
        for (int64_t k = 0; k < n; k++) {
            amax = fmax(amax, fabs(a[k]));
            dmax = fmax(dmax, fabs((double)a[k] - b[k]));
        }
        if (amax > 0) worst = fmax(worst, dmax / amax);
    }
    qs_safetensors_close(fa);
    qs_safetensors_close(fb);
    return worst;
}
