/* tests/test_cpu_quota.c — the cgroup CPU quota of an emulated slowdown (src/parallel/cpu_quota.c):
 * argument checks, and, where the machine lets this process use cgroups, a quota that really
 * slows a CPU-bound loop, moves every thread and back, and removes stale directories. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/timer.h"
#include "parallel/cpu_quota.h"

static double wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Spin until this process has used `ms` more CPU time; returns wall / CPU time. */
static double burn_ratio(double ms) {
    volatile double x = 1.0;
    double c0 = qs_process_cpu_ms(), w0 = wall_ms(), c = c0;
    while (c - c0 < ms) {
        for (int i = 0; i < 20000; i++) x = x * 1.0000001 + 1e-9;
        c = qs_process_cpu_ms();
    }
    return (wall_ms() - w0) / (c - c0);
}

/* The cpu cgroup path in a /proc/.../cgroup file: the v1 line listing cpu, else "0::". */
static void cpu_cgroup_of(const char *file, char *out, size_t cap) {
    FILE *f = fopen(file, "r");
    assert_non_null(f);
    char line[4352];
    out[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        char ctl[256];
        snprintf(ctl, sizeof ctl, ",%s,", c1 + 1);
        if (strstr(ctl, ",cpu,")) {
            snprintf(out, cap, "%s", c2 + 1);
            break;
        }
        if (strcmp(line, "0") == 0 && c1[1] == '\0') snprintf(out, cap, "%s", c2 + 1);
    }
    fclose(f);
}

/* Whether every thread of the process is in the cpu cgroup `want`. */
static bool all_threads_in(const char *want) {
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    bool all = true;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char file[300], cg[4096];
        snprintf(file, sizeof file, "/proc/self/task/%s/cgroup", e->d_name);
        cpu_cgroup_of(file, cg, sizeof cg);
        all = all && strcmp(cg, want) == 0;
        n++;
    }
    closedir(d);
    return all && n >= 2; /* the main thread and the helper */
}

static bool is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Skip the calling test when this process cannot use a cgroup quota. */
static void require_quota(void) {
    char why[1024];
    if (!qs_cpu_quota_available(why, sizeof why)) {
        print_message("cgroup CPU quota unavailable, skipping: %s\n", why);
        skip();
    }
}

/* apply, skipping the test when a cgroup v1 parent's own quota is smaller than asked for */
static void apply_or_skip(double slowdown, int threads, qs_cpu_quota *q) {
    qs_status st = qs_cpu_quota_apply(slowdown, threads, q);
    if (st == QS_ERR_UNSUPPORTED && strstr(qs_last_error(), "parent limit")) {
        print_message("the parent cgroup's quota is too small, skipping: %s\n", qs_last_error());
        skip();
    }
    assert_int_equal(st, QS_OK);
}

static void test_invalid_args(void **state) {
    qs_cpu_quota q;
    memset(&q, 0xff, sizeof q);
    assert_int_equal(qs_cpu_quota_apply(0.99, 1, &q), QS_ERR_INVALID_ARG);
    assert_false(q.active);
    assert_non_null(strstr(qs_last_error(), "slowdown"));
    assert_int_equal(qs_cpu_quota_apply(NAN, 1, &q), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_cpu_quota_apply(INFINITY, 1, &q), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_cpu_quota_apply(2.0, 0, &q), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "threads"));
    assert_int_equal(qs_cpu_quota_apply(2.0, -3, &q), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_cpu_quota_apply(2.0, 1, NULL), QS_ERR_INVALID_ARG);
    /* 1 thread at 1/20 is 500 us per 10 ms: below the kernel's 1000 us */
    assert_int_equal(qs_cpu_quota_apply(20.0, 1, &q), QS_ERR_UNSUPPORTED);
    assert_non_null(strstr(qs_last_error(), "minimum"));
    assert_false(q.active);
}

static void test_release_zeroed(void **state) {
    qs_cpu_quota q = {0};
    qs_cpu_quota_release(&q);
    qs_cpu_quota_release(&q);
    qs_cpu_quota_release(NULL);
    assert_false(q.active);
}

static void test_process_cpu_ms(void **state) {
    double a = qs_process_cpu_ms();
    assert_true(a > 0);
    burn_ratio(20);
    assert_true(qs_process_cpu_ms() >= a + 20);
}

static void *wait_on_pipe(void *arg) {
    char c;
    ssize_t r = read(*(int *)arg, &c, 1);
    (void)r;
    return NULL;
}

static void test_quota_slows_and_releases(void **state) {
    require_quota();
    char before[4096], cg[4096];
    cpu_cgroup_of("/proc/self/cgroup", before, sizeof before);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pthread_t helper; /* an existing thread must move too */
    assert_int_equal(pthread_create(&helper, NULL, wait_on_pipe, &fds[0]), 0);

    qs_cpu_quota q;
    apply_or_skip(2.0, 1, &q);
    assert_true(q.active);
    assert_int_equal(q.period_us, 10000);
    assert_int_equal(q.quota_us, 5000);
    assert_true(is_dir(q.path));
    char own[64];
    snprintf(own, sizeof own, "/qsync-%ld", (long)getpid());
    cpu_cgroup_of("/proc/self/cgroup", cg, sizeof cg);
    assert_true(strlen(cg) >= strlen(own) && strcmp(cg + strlen(cg) - strlen(own), own) == 0);
    assert_true(all_threads_in(cg));

    /* the quota is real: 300 ms of CPU take about 600 ms; retry only a too-slow (noisy) run */
    double ratio = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        ratio = burn_ratio(300);
        print_message("slowdown 2, 1 thread: wall/cpu = %.3f\n", ratio);
        if (ratio <= 2.6) break;
    }
    assert_true(ratio >= 1.6 && ratio <= 2.6);

    char path[4096];
    snprintf(path, sizeof path, "%s", q.path);
    qs_cpu_quota_release(&q);
    assert_false(q.active);
    assert_false(is_dir(path));
    cpu_cgroup_of("/proc/self/cgroup", cg, sizeof cg);
    assert_string_equal(cg, before);
    assert_true(all_threads_in(before));
    qs_cpu_quota_release(&q); /* idempotent */

    assert_int_equal(write(fds[1], "x", 1), 1);
    assert_int_equal(pthread_join(helper, NULL), 0);
    close(fds[0]);
    close(fds[1]);
}

static void test_quota_values(void **state) {
    require_quota();
    qs_cpu_quota q, again;
    apply_or_skip(1.0, 1, &q);
    assert_int_equal(q.quota_us, q.period_us);
    char file[4200], text[64] = "";
    snprintf(file, sizeof file, "%s/%s", q.path, q.version == 1 ? "cpu.cfs_quota_us" : "cpu.max");
    FILE *f = fopen(file, "r");
    assert_non_null(f);
    assert_non_null(fgets(text, sizeof text, f));
    fclose(f);
    assert_string_equal(text, q.version == 1 ? "10000\n" : "10000 10000\n");
    /* a second apply is refused and leaves the first in place */
    assert_int_equal(qs_cpu_quota_apply(1.5, 1, &again), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "release it first"));
    assert_false(again.active);
    assert_true(is_dir(q.path));
    qs_cpu_quota_release(&q);

    apply_or_skip(1.5, 4, &q);
    assert_int_equal(q.quota_us, 26667); /* round(4 × 10000 / 1.5) */
    qs_cpu_quota_release(&q);
    assert_false(is_dir(q.path));
}

static void test_stale_cleanup(void **state) {
    require_quota();
    qs_cpu_quota q;
    apply_or_skip(2.0, 1, &q);
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", q.parent);
    qs_cpu_quota_release(&q);

    long pid_max = 32768;
    FILE *f = fopen("/proc/sys/kernel/pid_max", "r");
    if (f) {
        if (fscanf(f, "%ld", &pid_max) != 1) pid_max = 32768;
        fclose(f);
    }
    char dead[4200], alive[4200], other[4200];
    long pid = pid_max - 1;
    for (;; pid--) {
        assert_true(pid > 300);
        snprintf(dead, sizeof dead, "%s/qsync-%ld", parent, pid);
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH && !is_dir(dead)) break;
    }
    snprintf(alive, sizeof alive, "%s/qsync-%ld", parent, (long)getppid()); /* a live pid: kept */
    snprintf(other, sizeof other, "%s/qsync-%ldx", parent, pid);            /* not "qsync-<pid>": kept */
    bool made_alive = !is_dir(alive);
    assert_int_equal(mkdir(dead, 0755), 0);
    if (made_alive) assert_int_equal(mkdir(alive, 0755), 0);
    assert_int_equal(mkdir(other, 0755), 0);

    qs_status st = qs_cpu_quota_apply(2.0, 1, &q);
    bool dead_gone = !is_dir(dead), alive_kept = is_dir(alive), other_kept = is_dir(other);
    qs_cpu_quota_release(&q);
    rmdir(dead);
    if (made_alive) rmdir(alive);
    rmdir(other); /* clean up before asserting */
    assert_int_equal(st, QS_OK);
    assert_true(dead_gone);
    assert_true(alive_kept);
    assert_true(other_kept);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_args),
        cmocka_unit_test(test_release_zeroed),
        cmocka_unit_test(test_process_cpu_ms),
        cmocka_unit_test(test_quota_slows_and_releases),
        cmocka_unit_test(test_quota_values),
        cmocka_unit_test(test_stale_cleanup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
