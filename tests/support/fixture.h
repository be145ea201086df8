/* tests/support/fixture.h — defines: the reader of the "QSFX" reference fixtures written by
 * tools/gen_fixtures.py (PyTorch, float64 references rounded once to float32).
 *
 * File format, version 1 (all integers little-endian):
 *   offset 0   char[4]   magic "QSFX"
 *          4   u32       version (= 1)
 *          8   u32       count: number of tensor records that follow
 *   then `count` records, back to back:
 *              u16       name length L (>= 1)
 *              u8[L]     name, not NUL-terminated, unique within the file
 *              u8        dtype: 0 = f32, 1 = i32, 2 = i64
 *              u8        ndim (0..8; ndim 0 is a scalar with one element)
 *              i64[ndim] shape, each >= 0
 *              raw       numel · sizeof(dtype) bytes, row-major, little-endian
 *   The file ends exactly after the last record; trailing bytes are an error.
 *
 * Tensor names (see the generator's docstring): "x" (NHWC), "labels" (i32), parameters and
 * buffers by PyTorch state_dict name, "out" (NHWC), "loss", "losses", "grad.x", "grad.<param>",
 * "after.<buffer>"; the tiny-model fixture adds "x.<s>", "labels.<s>", "grad0.<p>",
 * "final.<p>", "amplification".
 *
 * Every failure returns a QS_ERR_* status with a message (qs_last_error) that names the file,
 * the byte offset and the tensor involved. */
#ifndef QSYNC_TESTS_FIXTURE_H
#define QSYNC_TESTS_FIXTURE_H

#include <stdint.h>
#include <stddef.h>
#include "qsync/status.h"

#define QS_FX_MAX_DIMS 8

typedef enum qs_fx_dtype { QS_FX_F32 = 0, QS_FX_I32 = 1, QS_FX_I64 = 2 } qs_fx_dtype;

typedef struct qs_fx_tensor {
    char *name;
    qs_fx_dtype dtype;
    int ndim;
    int64_t shape[QS_FX_MAX_DIMS];
    int64_t numel;
    void *data;        /* host memory, aligned, in host byte order */
} qs_fx_tensor;

typedef struct qs_fixture {
    char path[512];
    qs_fx_tensor *tensors;
    int count;
} qs_fixture;

const char *qs_fx_dtype_name(qs_fx_dtype dt);
size_t qs_fx_dtype_size(qs_fx_dtype dt);

/* Parse a fixture from memory; `path` is only used in messages. */
qs_status qs_fixture_parse(const void *bytes, size_t size, const char *path, qs_fixture **out);
/* Read and parse a file. */
qs_status qs_fixture_load(const char *path, qs_fixture **out);
/* The fixture directory: $QS_FIXTURES, or "tests/fixtures" (relative to the source tree)
 * when that is unset. */
const char *qs_fixture_dir(void);
/* Load "$QS_FIXTURES/<file>" (QS_ERR_NOT_FOUND with a hint when QS_FIXTURES is unset). */
qs_status qs_fixture_open(const char *file, qs_fixture **out);
void qs_fixture_free(qs_fixture *fx);

/* The tensor called `name`, or NULL. */
const qs_fx_tensor *qs_fixture_find(const qs_fixture *fx, const char *name);
/* The tensor called `name`, checked to have dtype `dt` and, when shape != NULL, exactly
 * `ndim` dims equal to `shape` (ndim < 0: only the element count `numel_expect` is checked,
 * unless that is < 0 too). QS_ERR_NOT_FOUND / QS_ERR_MISMATCH with a message otherwise. */
qs_status qs_fixture_get(const qs_fixture *fx, const char *name, qs_fx_dtype dt, int ndim, const int64_t *shape,
                         int64_t numel_expect, const qs_fx_tensor **out);
/* Shorthand: f32 tensor `name` with exactly `numel` elements (any shape); NULL and a
 * recorded error if absent or different. */
const float *qs_fixture_f32(const qs_fixture *fx, const char *name, int64_t numel);

#endif
