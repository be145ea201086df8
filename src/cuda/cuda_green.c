/* src/cuda/cuda_green.c — an SM partition through a CUDA green context (cuda_green.h). */
#include "cuda/cuda_green.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>
#include <stdbool.h>
#include <string.h>

#define QS_GREEN_MAX_GROUPS 256

/* The driver entry points a partition needs (green contexts came with CUDA 12.4). */
typedef struct {
    PFN_cuDeviceGet_v2000 device_get;
    PFN_cuDeviceGetDevResource_v12040 get_resource;
    PFN_cuDevSmResourceSplitByCount_v12040 split;
    PFN_cuDevResourceGenerateDesc_v12040 generate;
    PFN_cuGreenCtxCreate_v12040 create;
    PFN_cuGreenCtxDestroy_v12040 destroy;
    PFN_cuCtxFromGreenCtx_v12040 to_ctx;
    PFN_cuCtxSetCurrent_v4000 set_current;
    PFN_cuGetErrorString_v6000 error_string;
} green_api;

static qs_status load(const char *name, unsigned version, void **fn) {
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, fn, version, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn) {
        (void)cudaGetLastError();
        return QS_FAIL(QS_ERR_UNSUPPORTED, "%s: the CUDA driver has no %s (green contexts need a driver for CUDA "
                       "12.4 or later): %s", QS_CUDA_SM_PARTITION_ENV, name,
                       e != cudaSuccess ? cudaGetErrorString(e) : "symbol not found");
    }
    return QS_OK;
}

static qs_status api(green_api *a) {
    QS_TRY(load("cuDeviceGet", 2000, (void **)&a->device_get));
    QS_TRY(load("cuDeviceGetDevResource", 12040, (void **)&a->get_resource));
    QS_TRY(load("cuDevSmResourceSplitByCount", 12040, (void **)&a->split));
    QS_TRY(load("cuDevResourceGenerateDesc", 12040, (void **)&a->generate));
    QS_TRY(load("cuGreenCtxCreate", 12040, (void **)&a->create));
    QS_TRY(load("cuGreenCtxDestroy", 12040, (void **)&a->destroy));
    QS_TRY(load("cuCtxFromGreenCtx", 12040, (void **)&a->to_ctx));
    QS_TRY(load("cuCtxSetCurrent", 4000, (void **)&a->set_current));
    QS_TRY(load("cuGetErrorString", 6000, (void **)&a->error_string));
    return QS_OK;
}

/* A driver call's failure as QS_ERR_BACKEND naming the call. */
static qs_status drv(const green_api *a, CUresult r, const char *call) {
    if (r == CUDA_SUCCESS) return QS_OK;
    const char *s = NULL;
    if (a->error_string(r, &s) != CUDA_SUCCESS || !s) s = "unknown error";
    return QS_FAIL(QS_ERR_BACKEND, "%s: %s failed: %s (CUresult %d)", QS_CUDA_SM_PARTITION_ENV, call, s, (int)r);
}

static bool parse_whole(const char *s, const char *end, long lo, int *out) {
    if (s == end) return false;
    long v = 0;
    for (const char *p = s; p < end; p++) {
        if (*p < '0' || *p > '9') return false;
        v = v * 10 + (*p - '0');
        if (v > 1000000) return false;
    }
    if (v < lo) return false;
    *out = (int)v;
    return true;
}

qs_status qs_cuda_green_parse(const char *text, int *offset, int *count) {
    const char *colon = text ? strchr(text, ':') : NULL;
    if (!colon || !parse_whole(text, colon, 0, offset) || !parse_whole(colon + 1, colon + strlen(colon), 1, count))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s=\"%s\": expected \"<offset>:<count>\", the first SM and the number of "
                       "SMs of the partition (whole numbers, count at least 1), e.g. \"0:64\"",
                       QS_CUDA_SM_PARTITION_ENV, text ? text : "");
    return QS_OK;
}

qs_status qs_cuda_green_enter(int device, int offset, int count, qs_cuda_green *out) {
    memset(out, 0, sizeof *out);
    green_api a;
    QS_TRY(api(&a));
    CUdevice dev;
    QS_TRY(drv(&a, a.device_get(&dev, device), "cuDeviceGet"));
    CUdevResource all, rest, groups[QS_GREEN_MAX_GROUPS];
    QS_TRY(drv(&a, a.get_resource(dev, &all, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource"));
    unsigned grain = all.sm.minSmPartitionSize > all.sm.smCoscheduledAlignment ? all.sm.minSmPartitionSize
                                                                               : all.sm.smCoscheduledAlignment;
    if (grain == 0) grain = 1;
    unsigned n = QS_GREEN_MAX_GROUPS;
    QS_TRY(drv(&a, a.split(groups, &n, &all, &rest, 0, grain), "cuDevSmResourceSplitByCount"));
    const unsigned covered = n * grain;
    if (offset % (int)grain || count % (int)grain || (unsigned)offset + (unsigned)count > covered)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s=%d:%d on cuda:%d: the device's %u SMs split into %u groups of %u "
                       "(%u SMs; %u left over): offset and count must be multiples of %u and offset + count at most %u",
                       QS_CUDA_SM_PARTITION_ENV, offset, count, device, all.sm.smCount, n, grain, covered,
                       rest.sm.smCount, grain, covered);
    CUdevResourceDesc desc;
    QS_TRY(drv(&a, a.generate(&desc, &groups[offset / (int)grain], (unsigned)count / grain), "cuDevResourceGenerateDesc"));
    CUgreenCtx green;
    QS_TRY(drv(&a, a.create(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate"));
    CUcontext ctx;
    qs_status st = drv(&a, a.to_ctx(&ctx, green), "cuCtxFromGreenCtx");
    if (st == QS_OK) st = drv(&a, a.set_current(ctx), "cuCtxSetCurrent");
    if (st != QS_OK) {
        (void)a.destroy(green);
        return st;
    }
    *out = (qs_cuda_green){.green = green, .ctx = ctx, .sm_offset = offset, .sm_count = count,
                           .sm_total = (int)all.sm.smCount, .set_current = (void *)a.set_current,
                           .destroy = (void *)a.destroy};
    return QS_OK;
}

qs_status qs_cuda_green_make_current(const qs_cuda_green *g) {
    if (!g || !g->green) return QS_OK;
    CUresult r = ((PFN_cuCtxSetCurrent_v4000)g->set_current)((CUcontext)g->ctx);
    if (r != CUDA_SUCCESS)
        return QS_FAIL(QS_ERR_BACKEND, "%s: cuCtxSetCurrent of the %d-SM partition failed (CUresult %d)",
                       QS_CUDA_SM_PARTITION_ENV, g->sm_count, (int)r);
    return QS_OK;
}

void qs_cuda_green_destroy(qs_cuda_green *g) {
    if (!g || !g->green) return;
    (void)((PFN_cuCtxSetCurrent_v4000)g->set_current)(NULL);
    (void)((PFN_cuGreenCtxDestroy_v12040)g->destroy)((CUgreenCtx)g->green);
    memset(g, 0, sizeof *g);
}
