/* src/core/atomic_file.c — atomic replace-by-rename file output, bounded whole-file reads
 * and output-directory checks (POSIX). */
#include "core/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* Copy of s in malloc'ed memory, or NULL (with QS_ERR_OOM recorded). */
static char *qs_af_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (!d) {
        QS_FAIL(QS_ERR_OOM, "out of memory copying the path '%s'", s);
        return NULL;
    }
    memcpy(d, s, n);
    return d;
}

/* The directory part of path ("." when there is none), malloc'ed; NULL on OOM. */
static char *qs_af_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return qs_af_strdup(".");
    size_t n = (size_t)(slash - path);
    if (n == 0) n = 1; /* "/file" -> "/" */
    char *d = malloc(n + 1);
    if (!d) {
        QS_FAIL(QS_ERR_OOM, "out of memory copying the directory of '%s'", path);
        return NULL;
    }
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

static void qs_af_release(qs_atomic_file *af) {
    free(af->path);
    free(af->tmp_path);
    af->path = NULL;
    af->tmp_path = NULL;
    af->fd = -1;
}

qs_status qs_atomic_begin(qs_atomic_file *af, const char *path) {
    af->fd = -1;
    af->path = NULL;
    af->tmp_path = NULL;
    if (!path || !path[0]) return QS_FAIL(QS_ERR_INVALID_ARG, "atomic write: empty output path");
    af->path = qs_af_strdup(path);
    if (!af->path) return QS_ERR_OOM;
    size_t cap = strlen(path) + 32;
    af->tmp_path = malloc(cap);
    if (!af->tmp_path) {
        qs_af_release(af);
        return QS_FAIL(QS_ERR_OOM, "out of memory preparing to write '%s'", path);
    }
    snprintf(af->tmp_path, cap, "%s.tmp.%ld", path, (long)getpid());
    /* O_TRUNC: a stale temp file from an earlier process with the same pid is overwritten. */
    af->fd = open(af->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (af->fd < 0) {
        int e = errno;
        qs_status st = QS_FAIL(QS_ERR_IO,
                               "cannot create '%s' (temporary file for '%s'): %s; check that the "
                               "directory exists and is writable",
                               af->tmp_path, path, strerror(e));
        qs_af_release(af);
        return st;
    }
    return QS_OK;
}

qs_status qs_atomic_write(qs_atomic_file *af, const void *data, size_t n) {
    if (af->fd < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "atomic write: file is not open");
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(af->fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            return QS_FAIL(QS_ERR_IO, "cannot write '%s' (temporary file for '%s'): %s",
                           af->tmp_path, af->path, strerror(e));
        }
        p += w;
        n -= (size_t)w;
    }
    return QS_OK;
}

void qs_atomic_abort(qs_atomic_file *af) {
    if (af->fd >= 0) close(af->fd);
    if (af->tmp_path) unlink(af->tmp_path);
    qs_af_release(af);
}

qs_status qs_atomic_commit(qs_atomic_file *af) {
    if (af->fd < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "atomic commit: file is not open");
    if (fsync(af->fd) != 0) {
        int e = errno;
        qs_status st = QS_FAIL(QS_ERR_IO, "cannot sync '%s' (temporary file for '%s'): %s",
                               af->tmp_path, af->path, strerror(e));
        qs_atomic_abort(af);
        return st;
    }
    int fd = af->fd;
    af->fd = -1;
    if (close(fd) != 0) {
        int e = errno;
        qs_status st = QS_FAIL(QS_ERR_IO, "cannot close '%s' (temporary file for '%s'): %s",
                               af->tmp_path, af->path, strerror(e));
        qs_atomic_abort(af);
        return st;
    }
    if (rename(af->tmp_path, af->path) != 0) {
        int e = errno;
        qs_status st = QS_FAIL(QS_ERR_IO, "cannot rename '%s' to '%s': %s; the previous file is unchanged",
                               af->tmp_path, af->path, strerror(e));
        qs_atomic_abort(af);
        return st;
    }
    /* The rename is only durable once the directory entry is on disk. */
    qs_status st = QS_OK;
    char *dir = qs_af_dirname(af->path);
    if (!dir) {
        st = QS_ERR_OOM;
    } else {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || (fsync(dfd) != 0 && errno != EINVAL)) {
            int e = errno;
            st = QS_FAIL(QS_ERR_IO, "wrote '%s' but cannot sync its directory '%s': %s; the file "
                         "may not survive a power loss", af->path, dir, strerror(e));
        }
        if (dfd >= 0) close(dfd);
        free(dir);
    }
    qs_af_release(af);
    return st;
}

qs_status qs_write_file_atomic(const char *path, const void *data, size_t n) {
    qs_atomic_file af;
    QS_TRY(qs_atomic_begin(&af, path));
    qs_status st = qs_atomic_write(&af, data, n);
    if (st != QS_OK) {
        qs_atomic_abort(&af);
        return st;
    }
    return qs_atomic_commit(&af);
}

qs_status qs_read_file(const char *path, size_t max_bytes, void **data_out, size_t *size_out) {
    *data_out = NULL;
    *size_out = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return QS_FAIL(e == ENOENT ? QS_ERR_NOT_FOUND : QS_ERR_IO, "cannot open '%s': %s", path,
                       strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return QS_FAIL(QS_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return QS_FAIL(QS_ERR_IO, "'%s' is not a regular file", path);
    }
    if ((unsigned long long)sb.st_size > (unsigned long long)max_bytes) {
        close(fd);
        return QS_FAIL(QS_ERR_IO, "'%s' is %lld bytes, more than the limit of %zu bytes for this kind of file",
                       path, (long long)sb.st_size, max_bytes);
    }
    size_t size = (size_t)sb.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return QS_FAIL(QS_ERR_OOM, "out of memory reading '%s' (%zu bytes)", path, size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            free(buf);
            close(fd);
            return QS_FAIL(QS_ERR_IO, "cannot read '%s' (%zu of %zu bytes read): %s", path, got,
                           size, e ? strerror(e) : "file shrank while reading");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[size] = '\0';
    *data_out = buf;
    *size_out = size;
    return QS_OK;
}

/* mkdir -p: create every missing component of dir. errno is kept from the failing call. */
static int qs_af_mkdirs(const char *dir) {
    char *tmp = qs_af_strdup(dir);
    if (!tmp) {
        errno = ENOMEM;
        return -1;
    }
    int rc = 0;
    for (char *p = tmp + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST) {
                rc = -1;
                break;
            }
            *p = saved;
            if (saved == '\0') break;
        }
    }
    int e = errno;
    free(tmp);
    errno = e;
    return rc;
}

qs_status qs_dir_ensure_writable(const char *dir) {
    if (!dir || !dir[0]) return QS_FAIL(QS_ERR_INVALID_ARG, "checkpoint directory: empty path");
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (errno != ENOENT || qs_af_mkdirs(dir) != 0 || stat(dir, &sb) != 0) {
            int e = errno;
            return QS_FAIL(QS_ERR_IO, "checkpoint directory %s is not writable: cannot create it: %s",
                           dir, strerror(e));
        }
    }
    if (!S_ISDIR(sb.st_mode))
        return QS_FAIL(QS_ERR_IO, "checkpoint directory %s is not writable: it exists and is not a "
                       "directory; choose another path", dir);
    if (access(dir, W_OK | X_OK) != 0) {
        int e = errno;
        return QS_FAIL(QS_ERR_IO, "checkpoint directory %s is not writable: %s; fix its permissions "
                       "or choose another directory", dir, strerror(e));
    }
    return QS_OK;
}
