/* src/core/hd.h — defines: QS_HD, the qualifier of the small inline element functions shared
 * by the CPU code and the CUDA kernels (number formats, INT8 rounding, Philox), so both
 * produce the same bits from one definition. Empty outside nvcc. */
#ifndef QSYNC_CORE_HD_H
#define QSYNC_CORE_HD_H

#ifdef __CUDACC__
#define QS_HD __host__ __device__
#else
#define QS_HD
#endif

#endif
