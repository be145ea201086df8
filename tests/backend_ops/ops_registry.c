/* tests/backend_ops/ops_registry.c — defines: bo_registry, the row tables of every op file in
 * the order test_backend_ops runs them. A new op file adds its table here. */
#include "bo.h"

extern const bo_row bo_rows_gemm[], bo_rows_gemm_bf16[], bo_rows_bmm[], bo_rows_quant[], bo_rows_eltwise[], bo_rows_reduce[], bo_rows_norm[], bo_rows_norm_bf16[], bo_rows_transformer[];

const bo_row *const bo_registry[] = {
    bo_rows_gemm,
    bo_rows_gemm_bf16,
    bo_rows_bmm,
    bo_rows_quant,
    bo_rows_eltwise,
    bo_rows_reduce,
    bo_rows_norm,
    bo_rows_norm_bf16,
    bo_rows_transformer,
    NULL,
};
