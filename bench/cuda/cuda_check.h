/* bench/cuda/cuda_check.h — defines: CK(call) for the CUDA benchmarks: a failing CUDA runtime
 * call prints where, what and CUDA's error name and text, then ends the program (status 1). */
#ifndef QSYNC_BENCH_CUDA_CHECK_H
#define QSYNC_BENCH_CUDA_CHECK_H

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(call)                                                                             \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d: %s failed: %s (%d): %s\n", __FILE__, __LINE__, #call,    \
                    cudaGetErrorName(e_), (int)e_, cudaGetErrorString(e_));                  \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

#endif
