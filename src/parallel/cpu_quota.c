/* src/parallel/cpu_quota.c — an OS-enforced CPU quota for the calling process: a child cgroup
 * "qsync-<pid>" of its cpu cgroup with a CFS bandwidth limit (cgroup v1 or v2). */
#include "parallel/cpu_quota.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define CQ_PATH 4096
#define CQ_FILE (CQ_PATH + 64) /* a cgroup directory plus a file name */

/* Where the process's cpu cgroup is. */
typedef struct cq_loc {
    int version;        /* 1 or 2 */
    char dir[CQ_PATH];  /* the cgroup directory of the process */
    bool inside;        /* dir is this process's own "qsync-<pid>" (a quota is applied) */
} cq_loc;

/* Whether `tok` is one of the `sep`-separated words of list. */
static bool cq_has_token(const char *list, const char *tok, char sep) {
    size_t n = strlen(tok);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, sep);
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, tok, n) == 0) return true;
        if (!end) break;
        p = end + 1;
    }
    return false;
}

/* Write text to an existing (kernel) file; 0 or the errno. */
static int cq_write(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    size_t n = strlen(text);
    ssize_t w;
    do w = write(fd, text, n); while (w < 0 && errno == EINTR);
    int e = w < 0 ? errno : (size_t)w != n ? EIO : 0;
    if (close(fd) != 0 && e == 0) e = errno;
    return e;
}

/* The first line of a (kernel) file without its newline; 0 or the errno. */
static int cq_read_line(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "re");
    if (!f) return errno;
    int e = 0;
    if (!fgets(buf, (int)cap, f)) {
        e = ferror(f) ? EIO : 0;
        buf[0] = '\0';
    }
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
    return e;
}

/* The process's cgroup path in the v1 hierarchy that has the cpu controller (version 1), or
 * else in the unified hierarchy (version 2), from /proc/self/cgroup. */
static qs_status cq_self_cgroup(int *version, char *cg, size_t cap) {
    const char *src = "/proc/self/cgroup";
    FILE *f = fopen(src, "re");
    if (!f) {
        int e = errno;
        return QS_FAIL(QS_ERR_UNSUPPORTED, "cannot read %s: %s", src, strerror(e));
    }
    char *line = NULL, v2[CQ_PATH] = "";
    size_t lcap = 0;
    bool have_v2 = false;
    *version = 0;
    while (getline(&line, &lcap, f) > 0) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'); /* "ID:controllers:path" */
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || strlen(c2 + 1) >= cap) continue;
        *c2 = '\0';
        if (cq_has_token(c1 + 1, "cpu", ',')) {
            snprintf(cg, cap, "%s", c2 + 1);
            *version = 1;
            break;
        }
        if (c1 - line == 1 && line[0] == '0' && c1[1] == '\0') {
            snprintf(v2, sizeof v2, "%s", c2 + 1);
            have_v2 = true;
        }
    }
    free(line);
    fclose(f);
    if (*version == 1) return QS_OK;
    if (!have_v2)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "no cgroup with the cpu controller: %s lists neither a v1 "
                       "cpu hierarchy nor the unified (v2) one", src);
    snprintf(cg, cap, "%s", v2);
    *version = 2;
    return QS_OK;
}

/* Decode mountinfo's octal escapes ("\040" for a space) in place. */
static void cq_unescape(char *s) {
    char *o = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' &&
            p[3] <= '7') {
            *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

/* The directory of cgroup path `cg` of the given version, from /proc/self/mountinfo
 * ("ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS"). */
static qs_status cq_mount_dir(int version, const char *cg, char *dir, size_t cap) {
    const char *src = "/proc/self/mountinfo";
    FILE *f = fopen(src, "re");
    if (!f) {
        int e = errno;
        return QS_FAIL(QS_ERR_UNSUPPORTED, "cannot read %s: %s", src, strerror(e));
    }
    char *line = NULL;
    size_t lcap = 0;
    bool found = false, too_long = false;
    while (!found && getline(&line, &lcap, f) > 0) {
        line[strcspn(line, "\n")] = '\0';
        char *fld[64];
        int n = 0;
        for (char *save = NULL, *t = strtok_r(line, " ", &save); t && n < 64; t = strtok_r(NULL, " ", &save))
            fld[n++] = t;
        int dash = 6;
        while (dash < n && strcmp(fld[dash], "-") != 0) dash++;
        if (dash + 3 >= n) continue;
        const char *fstype = fld[dash + 1], *superopts = fld[dash + 3];
        bool match = version == 1 ? strcmp(fstype, "cgroup") == 0 && cq_has_token(superopts, "cpu", ',')
                                  : strcmp(fstype, "cgroup2") == 0;
        if (!match) continue;
        char *root = fld[3], *mnt = fld[4];
        cq_unescape(root);
        cq_unescape(mnt);
        /* The mount shows the hierarchy from `root` down; cg must lie below it. */
        const char *rel = cg;
        if (strcmp(root, "/") != 0) {
            size_t rl = strlen(root);
            if (strncmp(cg, root, rl) != 0 || (cg[rl] != '/' && cg[rl] != '\0')) continue;
            rel = cg + rl;
        }
        if (strcmp(rel, "/") == 0) rel = "";
        int w = snprintf(dir, cap, "%s%s", strcmp(mnt, "/") == 0 && rel[0] ? "" : mnt, rel);
        if (w < 0 || (size_t)w >= cap) {
            too_long = true;
            continue;
        }
        found = true;
    }
    free(line);
    fclose(f);
    if (found) return QS_OK;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "the cgroup %s (%s) is not %s in %s", cg,
                   version == 1 ? "v1 cpu hierarchy" : "v2",
                   too_long ? "reachable by a path shorter than 4096 bytes" : "mounted", src);
}

static qs_status cq_locate(cq_loc *loc) {
    memset(loc, 0, sizeof *loc);
    char cg[CQ_PATH];
    QS_TRY(cq_self_cgroup(&loc->version, cg, sizeof cg));
    char own[32];
    snprintf(own, sizeof own, "qsync-%ld", (long)getpid());
    const char *base = strrchr(cg, '/');
    loc->inside = strcmp(base ? base + 1 : cg, own) == 0;
    return cq_mount_dir(loc->version, cg, loc->dir, sizeof loc->dir);
}

/* cgroup v2: the cpu controller must be available in dir and enabled for its children.
 * With enable, try "+cpu" in cgroup.subtree_control; without, only decide whether that
 * would work (the root cgroup, which alone has no cgroup.type, is exempt from the "no
 * internal processes" rule). *enabled: cpu is enabled for children now. */
static qs_status cq_v2_controller(const char *dir, bool enable, bool *enabled) {
    char file[CQ_FILE], buf[1024];
    *enabled = false;
    snprintf(file, sizeof file, "%s/cgroup.controllers", dir);
    int e = cq_read_line(file, buf, sizeof buf);
    if (e) return QS_FAIL(QS_ERR_UNSUPPORTED, "cannot read %s: %s", file, strerror(e));
    if (!cq_has_token(buf, "cpu", ' '))
        return QS_FAIL(QS_ERR_UNSUPPORTED, "the cpu controller is not delegated to the cgroup %s "
                       "(%s lists '%s')", dir, file, buf);
    snprintf(file, sizeof file, "%s/cgroup.subtree_control", dir);
    e = cq_read_line(file, buf, sizeof buf);
    if (e) return QS_FAIL(QS_ERR_UNSUPPORTED, "cannot read %s: %s", file, strerror(e));
    if (cq_has_token(buf, "cpu", ' ')) {
        *enabled = true;
        return QS_OK;
    }
    char type[CQ_FILE];
    snprintf(type, sizeof type, "%s/cgroup.type", dir);
    bool root = access(type, F_OK) != 0;
    if (enable) e = cq_write(file, "+cpu");
    else e = !root ? EBUSY : access(file, W_OK) != 0 ? errno : 0;
    if (e)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "cannot enable the cpu controller in %s: %s%s", file, strerror(e),
                       e == EBUSY ? " (cgroup v2 'no internal processes' rule: the cgroup holds this "
                                    "process and is not the root, so it cannot give cpu to children)" : "");
    *enabled = enable;
    return QS_OK;
}

/* rmdir every empty "qsync-<pid>" in dir whose pid no longer exists (not this process's). */
static void cq_remove_stale(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *ent; (ent = readdir(d)) != NULL;) {
        const char *p = ent->d_name;
        if (strncmp(p, "qsync-", 6) != 0 || !isdigit((unsigned char)p[6])) continue;
        char *end;
        errno = 0;
        long pid = strtol(p + 6, &end, 10);
        if (*end || errno || pid <= 0 || pid > INT_MAX || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char path[CQ_FILE + 256];
        /* rmdir fails (EBUSY) on a cgroup that still has tasks or children */
        if (snprintf(path, sizeof path, "%s/%s", dir, p) < (int)sizeof path) rmdir(path);
    }
    closedir(d);
}

/* cgroup v1 refuses a child more CPU than its parent's own quota: say what the parent allows. */
static void cq_v1_parent_limit(const char *parent, char *hint, size_t cap) {
    char file[CQ_FILE], quota[32] = "", period[32] = "";
    snprintf(file, sizeof file, "%s/cpu.cfs_quota_us", parent);
    int e = cq_read_line(file, quota, sizeof quota);
    snprintf(file, sizeof file, "%s/cpu.cfs_period_us", parent);
    e = e ? e : cq_read_line(file, period, sizeof period);
    if (e || strcmp(quota, "-1") == 0)
        snprintf(hint, cap, " (cgroup v1 parent limit: an ancestor may allow less)");
    else
        snprintf(hint, cap, " (cgroup v1 parent limit: the parent allows %s us per %s us and a child "
                 "may not have more)", quota, period);
}

/* Create the child cgroup of `parent` (replacing a stale empty one of the same name) and,
 * with limits, give it period/quota. On failure nothing is left. */
static qs_status cq_make_child(int version, const char *parent, const char *child, bool limits,
                               long period, long quota) {
    if (mkdir(child, 0755) != 0) {
        int e = errno;
        if (e != EEXIST || rmdir(child) != 0 || mkdir(child, 0755) != 0)
            return QS_FAIL(QS_ERR_UNSUPPORTED, "cannot create the cgroup %s: %s", child, strerror(e));
    }
    if (!limits) return QS_OK;
    char file[CQ_FILE], text[64];
    int e = 0;
    if (version == 1) {
        snprintf(file, sizeof file, "%s/cpu.cfs_period_us", child);
        snprintf(text, sizeof text, "%ld", period);
        e = cq_write(file, text);
        if (!e) {
            snprintf(file, sizeof file, "%s/cpu.cfs_quota_us", child);
            snprintf(text, sizeof text, "%ld", quota);
            e = cq_write(file, text);
        }
    } else {
        snprintf(file, sizeof file, "%s/cpu.max", child);
        snprintf(text, sizeof text, "%ld %ld", quota, period);
        e = cq_write(file, text);
    }
    if (!e) return QS_OK;
    rmdir(child);
    char hint[160] = "";
    if (e == EINVAL && version == 1) cq_v1_parent_limit(parent, hint, sizeof hint);
    return QS_FAIL(QS_ERR_UNSUPPORTED, "cannot write '%s' to %s: %s%s", text, file, strerror(e), hint);
}

qs_status qs_cpu_quota_apply(double slowdown, int threads, qs_cpu_quota *out) {
    if (!out) return QS_FAIL(QS_ERR_INVALID_ARG, "cpu quota: no output struct");
    memset(out, 0, sizeof *out);
    if (!isfinite(slowdown) || slowdown < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "cpu quota: slowdown %g must be a finite number >= 1", slowdown);
    if (threads < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "cpu quota: threads %d must be >= 1", threads);
    long period = QS_CPU_QUOTA_PERIOD_US;
    long quota = lround((double)threads * (double)period / slowdown);
    if (quota < QS_CPU_QUOTA_MIN_US)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "cpu quota: slowdown %g over %d thread(s) needs %ld us per "
                       "%ld us period, below the kernel's minimum quota of %ld us", slowdown, threads,
                       quota, period, QS_CPU_QUOTA_MIN_US);
    cq_loc loc;
    QS_TRY(cq_locate(&loc));
    if (loc.inside)
        return QS_FAIL(QS_ERR_INVALID_ARG, "cpu quota: this process is already in its quota cgroup %s; "
                       "release it first", loc.dir);
    if (loc.version == 2) {
        bool enabled;
        QS_TRY(cq_v2_controller(loc.dir, true, &enabled));
    }
    cq_remove_stale(loc.dir);
    long pid = (long)getpid();
    int w = snprintf(out->path, sizeof out->path, "%s/qsync-%ld", loc.dir, pid);
    if (w < 0 || (size_t)w >= sizeof out->path) {
        out->path[0] = '\0';
        return QS_FAIL(QS_ERR_UNSUPPORTED, "cpu quota: the cgroup path under %s is too long", loc.dir);
    }
    qs_status st = cq_make_child(loc.version, loc.dir, out->path, true, period, quota);
    if (st != QS_OK) {
        memset(out, 0, sizeof *out);
        return st;
    }
    char file[CQ_FILE], text[32];
    snprintf(file, sizeof file, "%s/cgroup.procs", out->path);
    snprintf(text, sizeof text, "%ld", pid);
    int e = cq_write(file, text);
    if (e) {
        rmdir(out->path);
        memset(out, 0, sizeof *out);
        return QS_FAIL(QS_ERR_UNSUPPORTED, "cannot move process %ld into %s: %s", pid, file, strerror(e));
    }
    snprintf(out->parent, sizeof out->parent, "%s", loc.dir);
    out->version = loc.version;
    out->period_us = period;
    out->quota_us = quota;
    out->active = true;
    return QS_OK;
}

void qs_cpu_quota_release(qs_cpu_quota *q) {
    if (!q || !q->active) return;
    q->active = false;
    char file[CQ_FILE], text[32];
    snprintf(file, sizeof file, "%s/cgroup.procs", q->parent);
    snprintf(text, sizeof text, "%ld", (long)getpid());
    int e = cq_write(file, text);
    if (e) {
        QS_FAIL(QS_ERR_IO, "cpu quota: cannot move process %s back into %s: %s; it stays in %s", text,
                file, strerror(e), q->path);
        return;
    }
    /* v2 may report the cgroup busy for a moment after its last task left */
    for (int i = 0; rmdir(q->path) != 0; i++) {
        e = errno;
        if (e != EBUSY || i == 50) {
            QS_FAIL(QS_ERR_IO, "cpu quota: cannot remove the cgroup %s: %s", q->path, strerror(e));
            return;
        }
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
}

bool qs_cpu_quota_available(char *why, size_t cap) {
    if (why && cap) why[0] = '\0';
    cq_loc loc;
    qs_status st = cq_locate(&loc);
    if (st == QS_OK && loc.inside) return true;
    bool limits = true;
    if (st == QS_OK && loc.version == 2) st = cq_v2_controller(loc.dir, false, &limits);
    if (st == QS_OK) {
        char child[CQ_FILE];
        snprintf(child, sizeof child, "%s/qsync-%ld", loc.dir, (long)getpid());
        /* the smallest quota: the one a parent's own limit is least likely to refuse */
        st = cq_make_child(loc.version, loc.dir, child, limits, QS_CPU_QUOTA_PERIOD_US,
                           QS_CPU_QUOTA_MIN_US);
        if (st == QS_OK && rmdir(child) != 0) {
            int e = errno;
            st = QS_FAIL(QS_ERR_UNSUPPORTED, "cannot remove the test cgroup %s: %s", child, strerror(e));
        }
    }
    if (st != QS_OK && why && cap) snprintf(why, cap, "%s", qs_last_error());
    return st == QS_OK;
}
