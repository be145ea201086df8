/* src/core/atomic_file.h — defines: crash-safe file output (write to "<path>.tmp.<pid>" in
 * the same directory, fsync, rename over <path>, fsync the directory), whole-file reads with
 * a size limit, and a check that an output directory exists and is writable.
 *
 * A reader of <path> therefore sees either the previous complete file or the new complete
 * file, never a half-written one; a failed write leaves no temporary file behind. */
#ifndef QSYNC_CORE_ATOMIC_FILE_H
#define QSYNC_CORE_ATOMIC_FILE_H

#include <stddef.h>
#include <stdbool.h>
#include "qsync/status.h"

/* An output file in progress. Fields are private; zero-initialise or use qs_atomic_begin. */
typedef struct qs_atomic_file {
    int fd;            /* -1 when not open */
    char *path;        /* final destination */
    char *tmp_path;    /* "<path>.tmp.<pid>" */
} qs_atomic_file;

/* Create the temporary file next to `path`. On failure nothing is left behind and af is
 * safe to pass to qs_atomic_abort. */
qs_status qs_atomic_begin(qs_atomic_file *af, const char *path);

/* Append n bytes (retries short writes and EINTR). On failure the caller must call
 * qs_atomic_abort. */
qs_status qs_atomic_write(qs_atomic_file *af, const void *data, size_t n);

/* fsync the data, rename the temporary file over the destination and fsync the directory.
 * Always releases af; on failure the temporary file is removed and the previous file at
 * `path` (if any) is intact. */
qs_status qs_atomic_commit(qs_atomic_file *af);

/* Discard the temporary file and release af. Safe to call on a released or zeroed af. */
void qs_atomic_abort(qs_atomic_file *af);

/* One-shot helper: atomically replace `path` with data[0..n). */
qs_status qs_write_file_atomic(const char *path, const void *data, size_t n);

/* Read the whole regular file `path` into newly malloc'ed memory (NUL-terminated one byte
 * past *size_out, so text files can be parsed directly). Files larger than max_bytes fail
 * with QS_ERR_IO naming the limit. Free *data_out with free(). */
qs_status qs_read_file(const char *path, size_t max_bytes, void **data_out, size_t *size_out);

/* Create `dir` (and missing parents, mode 0777 & ~umask) if needed, and check that it is a
 * directory this process can create files in. QS_ERR_IO
 * "checkpoint directory X is not writable: ..." otherwise. */
qs_status qs_dir_ensure_writable(const char *dir);

#endif
