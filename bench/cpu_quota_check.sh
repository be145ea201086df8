#!/usr/bin/env bash
# The slowdown a cgroup CPU quota (src/parallel/cpu_quota.c) actually applies to a CPU-bound
# loop: for each slowdown s, THREADS threads each spin for CPU_MS ms of CPU time under
# qs_cpu_quota_apply(s, THREADS); achieved = wall × THREADS / process CPU time (1 = no
# slowdown; a run without a quota first shows the machine's noise floor). One JSON line per
# run. Compiles a small driver against BUILD_DIR/libqsync.a (build it first).
# Usage: bench/cpu_quota_check.sh [BUILD_DIR] [ROUNDS]
#        env SLOWDOWNS="1.18 1.24 1.5 2" THREADS=1 CPU_MS=400
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
SLOWDOWNS=${SLOWDOWNS:-1.18 1.24 1.5 2}
THREADS=${THREADS:-1}
CPU_MS=${CPU_MS:-400}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat > "$TMP/driver.c" <<'C'
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "core/timer.h"
#include "parallel/cpu_quota.h"

static double cpu_ms_each;

static double now_ms(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void *spin(void *arg) {
    volatile double x = 1.0;
    double c0 = now_ms(CLOCK_THREAD_CPUTIME_ID);
    while (now_ms(CLOCK_THREAD_CPUTIME_ID) - c0 < cpu_ms_each)
        for (int i = 0; i < 20000; i++) x = x * 1.0000001 + 1e-9;
    return arg;
}

int main(int argc, char **argv) {
    double s = atof(argv[1]); /* 0: no quota */
    int threads = atoi(argv[2]);
    cpu_ms_each = atof(argv[3]);
    qs_cpu_quota q = {0};
    if (s > 0 && qs_cpu_quota_apply(s, threads, &q) != QS_OK) {
        fprintf(stderr, "cpu quota: %s\n", qs_last_error());
        return 1;
    }
    pthread_t t[256];
    double w0 = now_ms(CLOCK_MONOTONIC), c0 = qs_process_cpu_ms();
    for (int i = 1; i < threads; i++) pthread_create(&t[i], NULL, spin, NULL);
    spin(NULL);
    for (int i = 1; i < threads; i++) pthread_join(t[i], NULL);
    double wall = now_ms(CLOCK_MONOTONIC) - w0, cpu = qs_process_cpu_ms() - c0;
    qs_cpu_quota_release(&q);
    double achieved = wall * threads / cpu;
    printf("{\"slowdown\": %g, \"threads\": %d, \"version\": %d, \"period_us\": %ld, \"quota_us\": %ld, "
           "\"wall_ms\": %.1f, \"cpu_ms\": %.1f, \"achieved\": %.4f, \"error_pct\": %.2f}\n",
           s > 0 ? s : 1, threads, q.version, q.period_us, q.quota_us, wall, cpu, achieved,
           100 * (achieved / (s > 0 ? s : 1) - 1));
    return 0;
}
C
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc "$TMP/driver.c" "$BUILD/libqsync.a" -lm -lpthread \
  -o "$TMP/driver"
for r in $(seq 1 "$ROUNDS"); do
  "$TMP/driver" 0 "$THREADS" "$CPU_MS"
  for s in $SLOWDOWNS; do "$TMP/driver" "$s" "$THREADS" "$CPU_MS"; done
done
