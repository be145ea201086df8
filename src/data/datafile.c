/* src/data/datafile.c — sequential gzip-or-plain file reader with offset tracking (zlib gz*). */
#include "data/datafile.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

qs_status qs_data_join(char out[QS_DATA_PATH_MAX], const char *dir, const char *base) {
    int k = snprintf(out, QS_DATA_PATH_MAX, "%s/%s", dir, base);
    if (k < 0 || k >= QS_DATA_PATH_MAX)
        return QS_FAIL(QS_ERR_INVALID_ARG, "data directory path too long (%zu bytes, limit %d): '%.80s...'; use a shorter path",
                       strlen(dir), QS_DATA_PATH_MAX - 64, dir);
    return QS_OK;
}

bool qs_data_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode);
}

qs_status qs_datafile_open(qs_datafile *f, const char *path, const char *hint) {
    memset(f, 0, sizeof *f);
    size_t len = strlen(path);
    if (len >= sizeof f->path) return QS_FAIL(QS_ERR_INVALID_ARG, "path too long (%zu bytes): '%.80s...'", len, path);
    memcpy(f->path, path, len + 1);
    errno = 0;
    f->gz = gzopen(path, "rb");
    if (!f->gz) {
        int e = errno;
        if (e == ENOENT)
            return QS_FAIL(QS_ERR_NOT_FOUND, "%s: no such file%s%s", path, hint ? "; " : "", hint ? hint : "");
        if (e == 0) return QS_FAIL(QS_ERR_OOM, "%s: out of memory opening the file", path);
        return QS_FAIL(QS_ERR_IO, "%s: cannot open: %s; check the path and its permissions", path, strerror(e));
    }
    /* 1 MiB buffer: fewer read() calls; large reads go straight into the caller's buffer. */
    gzbuffer(f->gz, 1u << 20);
    return QS_OK;
}

qs_status qs_datafile_read(qs_datafile *f, void *buf, int64_t len, int64_t *got) {
    int64_t done = 0;
    uint8_t *p = buf;
    while (done < len) {
        int64_t want = len - done;
        if (want > (1 << 30)) want = 1 << 30;
        int r = gzread(f->gz, p + done, (unsigned)want);
        if (r > 0) { /* keep decompressed data even when zlib already saw the stream end early */
            done += r;
            continue;
        }
        int errnum = Z_OK;
        const char *zmsg = gzerror(f->gz, &errnum);
        if (r == 0 && errnum == Z_OK) break; /* clean end of data */
        const int64_t at = f->offset + done;
        f->offset = at;
        if (errnum == Z_BUF_ERROR)
            return QS_FAIL(QS_ERR_FORMAT,
                           "%s: truncated gzip stream: the compressed data ends after %lld decompressed bytes; "
                           "the file is incomplete — download or install it again",
                           f->path, (long long)at);
        if (errnum == Z_ERRNO)
            return QS_FAIL(QS_ERR_IO, "%s: read error at decompressed byte offset %lld: %s", f->path, (long long)at,
                           strerror(errno));
        if (errnum == Z_MEM_ERROR) return QS_FAIL(QS_ERR_OOM, "%s: out of memory while decompressing", f->path);
        /* zlib prefixes its message with the path; drop it, ours already names the file */
        size_t plen = strlen(f->path);
        if (zmsg && strncmp(zmsg, f->path, plen) == 0 && strncmp(zmsg + plen, ": ", 2) == 0) zmsg += plen + 2;
        /* zlib decompresses ahead into its buffer, so the damage lies at or after `at` */
        return QS_FAIL(QS_ERR_FORMAT,
                       "%s: corrupt gzip data (zlib: %s), found while reading from decompressed byte offset %lld; "
                       "download or install the file again",
                       f->path, zmsg ? zmsg : "unknown error", (long long)at);
    }
    f->offset += done;
    *got = done;
    return QS_OK;
}

bool qs_datafile_is_plain(const qs_datafile *f) { return f->gz && gzdirect(f->gz) == 1; }

void qs_datafile_close(qs_datafile *f) {
    if (f->gz) gzclose_r(f->gz);
    f->gz = NULL;
}
