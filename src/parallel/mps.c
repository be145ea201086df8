/* src/parallel/mps.c — a cuda worker's NVIDIA MPS limits through the environment (see mps.h). */
#include "parallel/mps.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/backend.h" /* QS_CUDA_SM_PARTITION_ENV */

/* The MPS pipe directory a CUDA client of this process would use. */
static const char *mps_pipe_directory(void) {
    const char *d = getenv("CUDA_MPS_PIPE_DIRECTORY");
    return d && d[0] ? d : QS_MPS_DEFAULT_PIPE_DIRECTORY;
}

/* Whether a listener of socket type `type` accepts connections on the UNIX socket at path (a
 * non-blocking connect: refused, missing or of another type = no; accepted, in progress or a
 * full backlog = yes). */
static bool socket_answers_as(const char *path, int type) {
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a.sun_path) return false; /* no daemon could have bound it either */
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, type, 0);
    if (fd < 0) return false;
    int flags = fcntl(fd, F_GETFL);
    bool ok = flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
    if (ok)
        ok = connect(fd, (const struct sockaddr *)&a, sizeof a) == 0 || errno == EINPROGRESS || errno == EAGAIN;
    close(fd);
    return ok;
}

/* The daemon's socket may be a stream or a sequenced-packet one. */
static bool socket_answers(const char *path) {
    return socket_answers_as(path, SOCK_STREAM) || socket_answers_as(path, SOCK_SEQPACKET);
}

/* The control daemon's pid file in its pipe directory: -1 absent or unreadable, 0 naming no live
 * process (a stale file), 1 naming a live one. */
static int pid_file_state(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/nvidia-cuda-mps-control.pid", dir) >= (int)sizeof path) return -1;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long pid = 0;
    const bool read = fscanf(f, "%ld", &pid) == 1;
    fclose(f);
    if (!read || pid <= 0) return 0;
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/%ld", pid);
    struct stat st;
    return stat(proc, &st) == 0 ? 1 : 0;
}

bool qs_mps_daemon_running(char *pipe_dir, size_t cap) {
    const char *dir = mps_pipe_directory();
    if (pipe_dir && cap) snprintf(pipe_dir, cap, "%s", dir);
    char control[4096];
    if (snprintf(control, sizeof control, "%s/control", dir) >= (int)sizeof control) return false;
    struct stat st;
    if (stat(control, &st) != 0) return false;
    const int pid = pid_file_state(dir);
    if (pid >= 0) return pid == 1; /* the daemon's own record decides */
    return S_ISFIFO(st.st_mode) || (S_ISSOCK(st.st_mode) && socket_answers(control));
}

/* setenv(name, value, overwrite), failing with QS_ERR_OOM. */
static qs_status set_env(const char *name, const char *value) {
    if (setenv(name, value, 1) != 0)
        return QS_FAIL(QS_ERR_OOM, "MPS: cannot set %s=%s in the environment: %s", name, value, strerror(errno));
    return QS_OK;
}

qs_status qs_mps_apply(const qs_cluster_worker *w, int rank) {
    if (!w || !w->cuda || (w->sm_percent <= 0 && w->sm_count <= 0 && w->memory_mb <= 0)) return QS_OK;
    char dir[4096], asked[160], limit[64] = "";
    if (w->sm_percent > 0) snprintf(limit, sizeof limit, "an SM share of %d%%", w->sm_percent);
    if (w->sm_count > 0) snprintf(limit, sizeof limit, "a partition of %d SMs", w->sm_count);
    if (limit[0] && w->memory_mb > 0)
        snprintf(asked, sizeof asked, "%s and %" PRId64 " MB of pinned device memory", limit, w->memory_mb);
    else if (limit[0]) snprintf(asked, sizeof asked, "%s", limit);
    else snprintf(asked, sizeof asked, "%" PRId64 " MB of pinned device memory", w->memory_mb);
    if (!qs_mps_daemon_running(dir, sizeof dir))
        return QS_FAIL(QS_ERR_UNSUPPORTED, "rank %d (worker type \"%s\", %s) asks %s through NVIDIA MPS, but no MPS "
                       "control daemon answers at %s/control (the pipe directory: $CUDA_MPS_PIPE_DIRECTORY, else %s); "
                       "start it: scripts/mps.sh start", rank, w->type, w->device, asked, dir,
                       QS_MPS_DEFAULT_PIPE_DIRECTORY);
    char v[64];
    if (w->sm_percent > 0) {
        snprintf(v, sizeof v, "%d", w->sm_percent);
        QS_TRY(set_env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", v));
    }
    if (w->sm_count > 0) {
        snprintf(v, sizeof v, "%d:%d", w->sm_offset, w->sm_count);
        QS_TRY(set_env(QS_CUDA_SM_PARTITION_ENV, v));
    }
    if (w->memory_mb > 0) {
        snprintf(v, sizeof v, "%d=%" PRId64 "M", w->cuda_device, w->memory_mb);
        QS_TRY(set_env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", v));
    }
    return QS_OK;
}
