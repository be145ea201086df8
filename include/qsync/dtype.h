/* qsync/dtype.h — defines: element types of stored tensors (qs_dtype) and the compute
 * precisions an operator can be assigned (qs_precision), with names and sizes. */
#ifndef QSYNC_DTYPE_H
#define QSYNC_DTYPE_H

#include <stddef.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qs_dtype {
    QS_F32 = 0,
    QS_BF16,
    QS_F16,
    QS_F8E4M3,
    QS_F8E5M2,
    QS_S8,
    QS_U8,
    QS_S32,
    QS_I64,
    QS_DTYPE_COUNT
} qs_dtype;

/* Operator precision: what an operator computes in. FP32 is the reference; TF32 exists
 * only on GPUs; FP16/FP8 are numerical emulation on the CPU (see docs/PRECISION.md once it
 * exists). */
typedef enum qs_precision {
    QS_PREC_FP32 = 0,
    QS_PREC_TF32,
    QS_PREC_BF16,
    QS_PREC_FP16,
    QS_PREC_FP8,
    QS_PREC_INT8,
    QS_PREC_COUNT
} qs_precision;

size_t qs_dtype_size(qs_dtype dt);            /* bytes per element */
const char *qs_dtype_name(qs_dtype dt);       /* "f32", "bf16", ... */
/* safetensors dtype string ("F32", "BF16", "I64", ...); NULL if it has none. */
const char *qs_dtype_safetensors_name(qs_dtype dt);
/* Parse a safetensors dtype string; returns false if unknown. */
bool qs_dtype_from_safetensors_name(const char *s, qs_dtype *out);

const char *qs_precision_name(qs_precision p); /* "fp32", "int8", ... */
/* Parse "fp32", "tf32", "bf16", "fp16", "fp8", "int8"; returns false if unknown. */
bool qs_precision_parse(const char *s, qs_precision *out);
/* Parse a comma-separated list of distinct precisions ("fp32,bf16,int8") into out[0..*n),
 * at most cap; returns false with a message in err (err_cap bytes) when a name is unknown,
 * repeated, the list empty or longer than cap. */
bool qs_precision_list_parse(const char *list, qs_precision *out, int cap, int *n, char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif
#endif
