/* src/io/safetensors.h — defines: a writer and a validating reader of the safetensors
 * format (https://github.com/huggingface/safetensors), the checkpoint container.
 *
 * Layout: 8-byte little-endian header length N; N bytes of JSON
 *   {"__metadata__": {"k": "v", ...}, "name": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * padded with spaces so that 8 + N is a multiple of 8; then the byte buffer. Offsets are
 * relative to the buffer, tensors tile it without holes or overlaps, data is row-major and
 * little-endian. The writer keeps the tensors in the order given (contiguous); it does not
 * reorder them for alignment as the reference implementation does, so a tensor's data is
 * only as aligned as the sizes of the tensors before it make it (always true for a file
 * whose tensors are all F32). Read data through memcpy unless you know the layout.
 * tools/safetensors_torch.py reads and writes the same format for PyTorch. */
#ifndef QSYNC_IO_SAFETENSORS_H
#define QSYNC_IO_SAFETENSORS_H

#include <stdint.h>
#include "qsync/status.h"
#include "qsync/dtype.h"
#include "qsync/tensor.h"

/* Largest JSON header accepted (same limit as the reference implementation). */
#define QS_ST_MAX_HEADER 100000000u

typedef struct qs_st_tensor {
    const char *name;
    qs_dtype dtype;
    int ndim;                      /* 0..QS_MAX_DIMS; 0 is a scalar */
    int64_t shape[QS_MAX_DIMS];
    const void *data;              /* host memory, numel × dtype size bytes */
} qs_st_tensor;

typedef struct qs_st_meta {
    const char *key;
    const char *value;
} qs_st_meta;

/* Write n tensors (in this order) and n_meta metadata strings to `path`, atomically (see
 * core/atomic_file.h): on any failure the previous file at path is unchanged. Names must be
 * unique, non-empty and not "__metadata__"; metadata keys must be unique. */
qs_status qs_safetensors_write(const char *path, const qs_st_tensor *tensors, int n,
                               const qs_st_meta *meta, int n_meta);

/* An opened, fully validated file (memory-mapped read-only). */
typedef struct qs_st_file qs_st_file;

/* Open and validate `path`: every structural problem (header length beyond the file, bad
 * JSON, unknown dtype, offsets out of range / overlapping / leaving holes / inconsistent with
 * shape × dtype size, non-string metadata) is QS_ERR_FORMAT naming the file and tensor. */
qs_status qs_safetensors_open(const char *path, qs_st_file **out);

/* Number of tensors (metadata excluded). */
int qs_safetensors_count(const qs_st_file *f);

/* Name of the i-th tensor in data-offset order (0 <= i < count), NULL if out of range. */
const char *qs_safetensors_name_at(const qs_st_file *f, int i);

/* Look up a tensor by name: dtype, shape and a read-only pointer into the file's mapping
 * (valid until qs_safetensors_close). QS_ERR_NOT_FOUND naming the file if absent. */
qs_status qs_safetensors_get(const qs_st_file *f, const char *name, qs_st_tensor *out);

/* Same as qs_safetensors_get but as a qs_tensor (data must be treated as read-only); the
 * signature fits lookup callbacks such as qs_optimizer_state_load's (ctx = the qs_st_file*). */
qs_status qs_safetensors_lookup(void *file, const char *name, qs_tensor *out);

/* Value of metadata `key`, or NULL if absent. Valid until qs_safetensors_close. */
const char *qs_safetensors_meta(const qs_st_file *f, const char *key);

/* The path the file was opened from. */
const char *qs_safetensors_path(const qs_st_file *f);

void qs_safetensors_close(qs_st_file *f);

#endif
