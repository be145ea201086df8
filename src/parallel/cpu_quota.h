/* src/parallel/cpu_quota.h — defines: an OS-enforced CPU quota for the calling process (the
 * cgroup part of an emulated slowdown; the duty cycle in src/graph/graph.c is the fallback).
 *
 * The process (all its threads) is moved into a new child "qsync-<pid>" of its current cpu
 * cgroup whose CFS bandwidth is quota_us per period_us = 10000 µs, with
 * quota_us = round(threads × period_us / slowdown): `threads` busy compute threads then get
 * 1/slowdown of the CPU time they would use, enforced by the kernel every 10 ms.
 *
 * Locations come from /proc/self/cgroup and /proc/self/mountinfo (no fixed /sys/fs/cgroup).
 * cgroup v1 (a hierarchy with the cpu controller) is preferred when the process has one;
 * cgroup v2 (unified) otherwise. Limits files: v1 cpu.cfs_period_us and cpu.cfs_quota_us,
 * v2 cpu.max ("QUOTA PERIOD"). The process moves through cgroup.procs (every thread moves,
 * in both versions).
 *
 * cgroup v2: the cpu controller must be listed in the parent's cgroup.controllers and be
 * enabled in its cgroup.subtree_control; apply tries to enable it ("+cpu", left enabled).
 * Because of v2's "no internal processes" rule that works only in the root cgroup: a
 * non-root cgroup that holds this process cannot enable controllers for its children, and
 * apply then fails with QS_ERR_UNSUPPORTED saying so (run the job in a leaf below a cgroup
 * that delegates cpu, or use the duty cycle).
 *
 * Threads created later inherit the cgroup of their creator, so the quota covers them too.
 * Not thread-safe: one thread of the process applies and releases (any one: the whole
 * process moves). A child process forked while the quota is applied stays in the child
 * cgroup and keeps it from being removed. */
#ifndef QSYNC_PARALLEL_CPU_QUOTA_H
#define QSYNC_PARALLEL_CPU_QUOTA_H

#include <stdbool.h>
#include <stddef.h>

#include "qsync/status.h"

#define QS_CPU_QUOTA_PERIOD_US 10000L
#define QS_CPU_QUOTA_MIN_US 1000L /* the kernel's smallest CFS quota */

/* An applied quota. Zero-initialise; only qs_cpu_quota_apply makes it active. */
typedef struct qs_cpu_quota {
    char path[4096];   /* the child cgroup directory ".../qsync-<pid>" */
    char parent[4096]; /* the cgroup directory the process was in */
    int version;       /* 1 or 2 */
    long period_us, quota_us;
    bool active;       /* the process is in `path` */
} qs_cpu_quota;

/* Move the calling process into a new child cgroup limited to 1/slowdown of `threads` CPUs
 * (see above). Stale empty "qsync-<pid>" siblings whose pid no longer exists (kill(pid, 0)
 * fails with ESRCH) are removed first (rmdir only; nothing else is touched).
 * QS_ERR_INVALID_ARG: slowdown < 1 or not finite, threads < 1, out NULL, or a quota is
 * already applied to this process (release it first).
 * QS_ERR_UNSUPPORTED, naming the file and the errno string (callers fall back to a duty
 * cycle): no cpu controller, cgroup file system read-only or not writable, v2 controller not
 * delegable, or a quota below QS_CPU_QUOTA_MIN_US (slowdown > 10 × threads). On any failure
 * nothing is left behind (the child is removed, the process is where it was) and
 * out->active is false. */
qs_status qs_cpu_quota_apply(double slowdown, int threads, qs_cpu_quota *out);

/* Move the process back to q->parent and remove q->path; q becomes inactive. Safe on a
 * zeroed or inactive struct, idempotent. A failure (not expected) leaves q inactive and
 * records a message for qs_last_error(). */
void qs_cpu_quota_release(qs_cpu_quota *q);

/* Whether qs_cpu_quota_apply would work in this process, decided from the cgroup files and
 * a test child "qsync-<pid>" created, given limits and removed (the process is not moved and
 * stale directories are not cleaned). When false, `why` (cap bytes, may be NULL) gets the
 * reason, in the words apply would use. */
bool qs_cpu_quota_available(char *why, size_t cap);

#endif
