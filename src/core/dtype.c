/* src/core/dtype.c — dtype and precision names and sizes. */
#include "qsync/dtype.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    const char *st_name;
    size_t size;
} qs_dtype_info;

static const qs_dtype_info qs_dtype_table[QS_DTYPE_COUNT] = {
    [QS_F32] = {"f32", "F32", 4},       [QS_BF16] = {"bf16", "BF16", 2},
    [QS_F16] = {"f16", "F16", 2},       [QS_F8E4M3] = {"f8e4m3", "F8_E4M3", 1},
    [QS_F8E5M2] = {"f8e5m2", "F8_E5M2", 1}, [QS_S8] = {"s8", "I8", 1},
    [QS_U8] = {"u8", "U8", 1},          [QS_S32] = {"s32", "I32", 4},
    [QS_I64] = {"i64", "I64", 8},
};

static const char *const qs_precision_names[QS_PREC_COUNT] = {
    [QS_PREC_FP32] = "fp32", [QS_PREC_TF32] = "tf32", [QS_PREC_BF16] = "bf16",
    [QS_PREC_FP16] = "fp16", [QS_PREC_FP8] = "fp8",   [QS_PREC_INT8] = "int8",
};

size_t qs_dtype_size(qs_dtype dt) { return (unsigned)dt < QS_DTYPE_COUNT ? qs_dtype_table[dt].size : 0; }

const char *qs_dtype_name(qs_dtype dt) {
    return (unsigned)dt < QS_DTYPE_COUNT ? qs_dtype_table[dt].name : "invalid";
}

const char *qs_dtype_safetensors_name(qs_dtype dt) {
    return (unsigned)dt < QS_DTYPE_COUNT ? qs_dtype_table[dt].st_name : NULL;
}

bool qs_dtype_from_safetensors_name(const char *s, qs_dtype *out) {
    for (int i = 0; i < QS_DTYPE_COUNT; i++) {
        if (strcmp(s, qs_dtype_table[i].st_name) == 0) {
            *out = (qs_dtype)i;
            return true;
        }
    }
    return false;
}

const char *qs_precision_name(qs_precision p) {
    return (unsigned)p < QS_PREC_COUNT ? qs_precision_names[p] : "invalid";
}

bool qs_precision_parse(const char *s, qs_precision *out) {
    for (int i = 0; i < QS_PREC_COUNT; i++) {
        if (strcmp(s, qs_precision_names[i]) == 0) {
            *out = (qs_precision)i;
            return true;
        }
    }
    return false;
}

bool qs_precision_list_parse(const char *list, qs_precision *out, int cap, int *n, char *err, size_t err_cap) {
    *n = 0;
    const char *p = list ? list : "";
    while (*p) {
        size_t len = strcspn(p, ",");
        char tok[16];
        snprintf(tok, sizeof tok, "%.*s", (int)(len < sizeof tok - 1 ? len : sizeof tok - 1), p);
        qs_precision q;
        if (len >= sizeof tok || !qs_precision_parse(tok, &q)) {
            snprintf(err, err_cap, "unknown precision '%.*s' (fp32, tf32, bf16, fp16, fp8, int8)", (int)len, p);
            return false;
        }
        for (int i = 0; i < *n; i++)
            if (out[i] == q) {
                snprintf(err, err_cap, "precision '%s' is listed twice", tok);
                return false;
            }
        if (*n == cap) {
            snprintf(err, err_cap, "more than %d precisions", cap);
            return false;
        }
        out[(*n)++] = q;
        p += len;
        if (*p == ',') p++;
    }
    if (*n == 0) snprintf(err, err_cap, "empty list of precisions");
    return *n > 0;
}
