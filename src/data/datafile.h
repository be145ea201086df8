/* src/data/datafile.h — defines: internal sequential reader for dataset files, gzip or plain
 * (zlib reads plain files transparently), that tracks the decompressed byte offset so errors can
 * say where a file went wrong, and path helpers. Not part of the public API. */
#ifndef QSYNC_DATA_DATAFILE_H
#define QSYNC_DATA_DATAFILE_H

#include <stdbool.h>
#include <stdint.h>
#include <zlib.h>

#include "qsync/status.h"

#define QS_DATA_PATH_MAX 4096

typedef struct qs_datafile {
    gzFile gz;
    char path[QS_DATA_PATH_MAX];
    int64_t offset; /* decompressed bytes consumed so far */
} qs_datafile;

/* Open path for reading. A missing file → QS_ERR_NOT_FOUND "<path>: no such file; <hint>"
 * (hint may be NULL); other failures → QS_ERR_IO. */
qs_status qs_datafile_open(qs_datafile *f, const char *path, const char *hint);

/* Read up to len bytes into buf; *got = bytes read, < len only at the end of the data.
 * A gzip stream that stops early → QS_ERR_FORMAT "truncated gzip stream"; corrupt compressed
 * data → QS_ERR_FORMAT; an OS read error → QS_ERR_IO; each names the path and offset. */
qs_status qs_datafile_read(qs_datafile *f, void *buf, int64_t len, int64_t *got);

/* True when the file is being read uncompressed (valid after the first read). */
bool qs_datafile_is_plain(const qs_datafile *f);

void qs_datafile_close(qs_datafile *f);

/* out = dir + "/" + base; QS_ERR_INVALID_ARG when it does not fit. */
qs_status qs_data_join(char out[QS_DATA_PATH_MAX], const char *dir, const char *base);

/* True when path names an existing file (stat succeeds). */
bool qs_data_exists(const char *path);

#endif
