/* bench_conv_cudnn.cu — probe: does cuDNN 9 run FP8 (E4M3 in, FP32 accumulate) 3×3 convolution
 * forward / backward-data / backward-weights through the graph (cudnnBackend*) API, and how
 * fast against BF16, on ResNet-like NHWC shapes (issue 7, deliverable 1, second part).
 * A measurement, not the backend. Standalone apart from the cuDNN graph steps it shares with the
 * backend (src/cuda/cuda_conv_graph.{h,c}, compiled with it). One JSON document on
 * stdout; errors on stderr. Unsupported combinations are results (the failing call and
 * cuDNN's status and last error message are reported), not failures.
 *
 * Per (precision, direction, shape) it tries graph variants in order and reports each:
 *   bf16: "plain"  conv, bf16 in, bf16 out, fp32 compute
 *   fp8 : "out_f32"  conv, e4m3 in, fp32 out
 *         "out_bf16" conv, e4m3 in, bf16 out
 *         "out_fp8"  conv, e4m3 in, e4m3 out
 *         "scaled_fp8" conv -> virtual fp32 -> ×descale_a -> ×descale_b -> ×scale_out -> e4m3
 *         "scaled_bf16" the same chain into a bf16 output
 * For each variant: heuristics (mode A, then FALLBACK) -> up to 4 execution plans are finalized
 * and briefly timed, the fastest is timed --iters times after --warmup (cudaEvents, median).
 * FLOPs = 2·N·K·C·H·W·R·S for each direction.
 *
 * Build: bench/cuda/build.sh   Run: build-cuda/bench_conv_cudnn [--iters N] [--warmup N]
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cudnn.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <algorithm>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "cuda/cuda_conv_graph.h"

/* fatal cuDNN check (setup calls that must not fail) */
#define CKD(call)                                                                            \
    do {                                                                                     \
        cudnnStatus_t s_ = (call);                                                           \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                    \
            char m_[1024];                                                                   \
            cudnnGetLastErrorString(m_, sizeof m_);                                          \
            fprintf(stderr, "%s:%d: %s failed: %s (%d): %s\n", __FILE__, __LINE__, #call,    \
                    cudnnGetErrorString(s_), (int)s_, m_);                                   \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* non-fatal cuDNN check: records the failure (the call named `what`) in g_err */
static std::string g_err;
static void record_fail(const char *what, cudnnStatus_t s, const char *file, int line) {
    char m[1024];
    m[0] = 0;
    cudnnGetLastErrorString(m, sizeof m);
    char b[1600];
    snprintf(b, sizeof b, "%s -> %s (%d): %s", what, cudnnGetErrorString(s), (int)s, m);
    g_err = b;
    fprintf(stderr, "%s:%d: %s\n", file, line, b);
}
/* ... and returns false from the function */
#define TRY(call)                                                                            \
    do {                                                                                     \
        cudnnStatus_t s_ = (call);                                                           \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                    \
            record_fail(#call, s_, __FILE__, __LINE__);                                      \
            return false;                                                                    \
        }                                                                                    \
    } while (0)
/* the same for a qs_cuda_cg_* setter fn(args..., &call) of src/cuda/cuda_conv_graph.h */
#define TRYC(fn, ...)                                                                        \
    do {                                                                                     \
        const char *c_ = #fn;                                                                \
        cudnnStatus_t s_ = fn(__VA_ARGS__, &c_);                                             \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                    \
            record_fail(c_, s_, __FILE__, __LINE__);                                         \
            return false;                                                                    \
        }                                                                                    \
    } while (0)

static std::string json_escape(const std::string &s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') { o += '\\'; o += c; }
        else if ((unsigned char)c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); o += b; }
        else o += c;
    }
    return o;
}

/* ------------------------------------------------------------------ data fill */

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* uniform(-1,1) values as bf16 (kind 0) or e4m3 (kind 1) */
__global__ void fill(void *p, size_t n, uint64_t seed, int kind) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = ((mix64(seed ^ (i * 0x100000001B3ull)) >> 40) * (2.0f / 16777216.0f)) - 1.0f;
        if (kind == 0) ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
        else ((__nv_fp8_e4m3 *)p)[i] = __nv_fp8_e4m3(v);
    }
}

/* ------------------------------------------------------------------ descriptors */

struct Desc { /* owns backend descriptors made during one graph build */
    std::vector<cudnnBackendDescriptor_t> all;
    ~Desc() { for (auto d : all) cudnnBackendDestroyDescriptor(d); }
};

static bool make(Desc &D, cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *out) {
    TRY(cudnnBackendCreateDescriptor(t, out));
    D.all.push_back(*out);
    return true;
}

/* 4-d tensor, dims in N,C,H,W order, NHWC strides (filters: K,C,R,S dims, KRSC strides) */
static bool tensor(Desc &D, cudnnBackendDescriptor_t *t, int64_t uid, cudnnDataType_t dt,
                   int64_t n, int64_t c, int64_t h, int64_t w, bool virt) {
    if (!make(D, CUDNN_BACKEND_TENSOR_DESCRIPTOR, t)) return false;
    TRYC(qs_cuda_cg_tensor, *t, uid, dt, n, c, h, w, virt);
    return true;
}

static bool pw_mul(Desc &D, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                   cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t *op) {
    cudnnBackendDescriptor_t pw;
    cudnnPointwiseMode_t mode = CUDNN_POINTWISE_MUL;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    if (!make(D, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw)) return false;
    TRY(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    TRY(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    TRY(cudnnBackendFinalize(pw));
    if (!make(D, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, op)) return false;
    TRY(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
    TRY(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    TRY(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
    TRY(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    TRY(cudnnBackendFinalize(*op));
    return true;
}

enum Dir { FWD = 0, DGRAD = 1, WGRAD = 2 };
static const char *dir_name[3] = {"fwd", "dgrad", "wgrad"};

struct Shape { int64_t n, c, k, h, w; };

struct Variant {
    const char *name;
    cudnnDataType_t in;  /* both conv inputs */
    cudnnDataType_t out; /* the graph's output */
    bool scaled;         /* conv -> virtual fp32 -> 3 scalar muls -> out */
};

/* uids */
constexpr int64_t U_X = 1, U_W = 2, U_Y = 3, U_S0 = 10, U_V0 = 20, U_V1 = 21, U_V2 = 22;

struct Bufs { void *x, *w, *y, *s[3]; };

struct Result {
    bool ok = false;
    std::string stage, err;
    int n_cfgs = 0, n_plans = 0;
    double ms = 0, tflops = 0;
    int64_t ws = 0;
    std::string engine;
};

static bool build_and_run(cudnnHandle_t h, Dir dir, const Shape &S, const Variant &V, Bufs &B,
                          int warmup, int iters, Result &R) {
    Desc D;
    const int64_t Ho = S.h, Wo = S.w; /* 3×3, pad 1, stride 1 */
    /* tensors: the conv's two inputs and its output, by direction */
    cudnnBackendDescriptor_t tx, tw, ty;
    cudnnDataType_t cdt = V.scaled ? CUDNN_DATA_FLOAT : V.out; /* conv output type */
    /* conv output uid is the real output unless scaled */
    int64_t out_uid = V.scaled ? U_V0 : (dir == FWD ? U_Y : dir == DGRAD ? U_X : U_W);
    R.stage = "tensor descriptors";
    /* X: N,C,H,W  W: K,C,3,3  Y: N,K,Ho,Wo */
    if (!tensor(D, &tx, dir == DGRAD ? out_uid : U_X, dir == DGRAD ? cdt : V.in, S.n, S.c, S.h, S.w,
                dir == DGRAD && V.scaled)) return false;
    if (!tensor(D, &tw, dir == WGRAD ? out_uid : U_W, dir == WGRAD ? cdt : V.in, S.k, S.c, 3, 3,
                dir == WGRAD && V.scaled)) return false;
    if (!tensor(D, &ty, dir == FWD ? out_uid : U_Y, dir == FWD ? cdt : V.in, S.n, S.k, Ho, Wo,
                dir == FWD && V.scaled)) return false;

    R.stage = "convolution descriptor";
    cudnnBackendDescriptor_t conv;
    const int64_t str[2] = {1, 1}, pad[2] = {1, 1};
    if (!make(D, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv)) return false;
    TRYC(qs_cuda_cg_conv, conv, str, pad);

    R.stage = "convolution operation";
    cudnnBackendDescriptor_t op;
    const int di = (int)dir; /* FWD, DGRAD, WGRAD = 0, 1, 2: QS_CUDA_CG_FWD, _BWD_DATA, _BWD_FILTER */
    if (!make(D, qs_cuda_cg_conv_op_type(di), &op)) return false;
    TRYC(qs_cuda_cg_conv_op, op, di, tx, tw, ty, conv);
    std::vector<cudnnBackendDescriptor_t> ops = {op};

    /* scale chain: v0 (conv out) × s0 -> v1 × s1 -> v2 × s2 -> real output */
    if (V.scaled) {
        R.stage = "scale pointwise ops";
        int64_t on = dir == WGRAD ? S.k : S.n, oc = dir == FWD ? S.k : S.c;
        int64_t oh = dir == WGRAD ? 3 : S.h, ow = dir == WGRAD ? 3 : S.w;
        int64_t real_uid = dir == FWD ? U_Y : dir == DGRAD ? U_X : U_W;
        cudnnBackendDescriptor_t v0 = dir == FWD ? ty : dir == DGRAD ? tx : tw, v1, v2, yo, s[3];
        for (int i = 0; i < 3; i++)
            if (!tensor(D, &s[i], U_S0 + i, CUDNN_DATA_FLOAT, 1, 1, 1, 1, false)) return false;
        if (!tensor(D, &v1, U_V1, CUDNN_DATA_FLOAT, on, oc, oh, ow, true)) return false;
        if (!tensor(D, &v2, U_V2, CUDNN_DATA_FLOAT, on, oc, oh, ow, true)) return false;
        if (!tensor(D, &yo, real_uid, V.out, on, oc, oh, ow, false)) return false;
        cudnnBackendDescriptor_t p0, p1, p2;
        if (!pw_mul(D, v0, s[0], v1, &p0) || !pw_mul(D, v1, s[1], v2, &p1) || !pw_mul(D, v2, s[2], yo, &p2))
            return false;
        ops.push_back(p0); ops.push_back(p1); ops.push_back(p2);
    }

    R.stage = "operation graph";
    cudnnBackendDescriptor_t graph;
    if (!make(D, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph)) return false;
    TRYC(qs_cuda_cg_graph, graph, h, ops.data(), (int64_t)ops.size());

    /* heuristics: mode A, then FALLBACK (only when A offers none); collect engine configs */
    std::vector<cudnnBackendDescriptor_t> cfgs;
    cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    std::string heur_err;
    for (int m = 0; m < 2; m++) {
        R.stage = m == 0 ? "engine heuristics (mode A)" : "engine heuristics (fallback)";
        cudnnBackendDescriptor_t heur;
        if (!make(D, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur)) return false;
        const char *call = "qs_cuda_cg_heur";
        cudnnStatus_t st = qs_cuda_cg_heur(heur, graph, modes[m], &call);
        if (st != CUDNN_STATUS_SUCCESS) {
            char msg[1024]; msg[0] = 0; cudnnGetLastErrorString(msg, sizeof msg);
            heur_err += std::string(R.stage) + ": " + call + " -> " + cudnnGetErrorString(st) + ": " + msg + "; ";
            continue;
        }
        cudnnBackendDescriptor_t *got = NULL;
        int64_t ngot = 0, wanted = 0;
        if (qs_cuda_cg_engine_configs(heur, &got, &ngot, &wanted) != 0) { g_err = "out of memory for engine configs"; return false; }
        for (int64_t i = 0; i < ngot; i++) { D.all.push_back(got[i]); cfgs.push_back(got[i]); }
        free(got);
        if (ngot == 0) { heur_err += std::string(R.stage) + ": 0 engine configs; "; continue; }
        if (!cfgs.empty()) break;
    }
    R.n_cfgs = (int)cfgs.size();
    if (cfgs.empty()) { R.stage = "engine heuristics"; g_err = heur_err.empty() ? "no engine config" : heur_err; return false; }

    /* plans: finalize up to 4 that succeed */
    R.stage = "execution plan";
    std::vector<cudnnBackendDescriptor_t> plans;
    std::vector<int64_t> wss;
    std::vector<std::string> names;
    std::string plan_err;
    for (auto cfg : cfgs) {
        if (plans.size() >= 4) break;
        cudnnBackendDescriptor_t plan;
        if (!make(D, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan)) return false;
        int64_t ws = 0;
        const char *call = "qs_cuda_cg_plan";
        cudnnStatus_t st = qs_cuda_cg_plan(plan, h, cfg, &ws, &call);
        if (st != CUDNN_STATUS_SUCCESS) {
            char msg[1024]; msg[0] = 0; cudnnGetLastErrorString(msg, sizeof msg);
            if (plan_err.size() < 600) plan_err += std::string(call) + " -> " + cudnnGetErrorString(st) + ": " + msg + "; ";
            continue;
        }
        char tag[256] = "";
        bool nondet = false;
        int64_t idx = -1; /* engine global index from the config's engine */
        (void)qs_cuda_cg_cfg_ok(cfg, &nondet, &idx);
        if (idx >= 0) snprintf(tag, sizeof tag, "engine %lld", (long long)idx);
        plans.push_back(plan); wss.push_back(ws); names.push_back(tag);
    }
    R.n_plans = (int)plans.size();
    if (plans.empty()) { g_err = plan_err; return false; }

    /* variant pack pointers */
    std::vector<int64_t> uids = {U_X, U_W, U_Y};
    std::vector<void *> ptrs = {B.x, B.w, B.y};
    if (V.scaled) for (int i = 0; i < 3; i++) { uids.push_back(U_S0 + i); ptrs.push_back(B.s[i]); }

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    double best = 1e30; int bi = -1;
    std::string exec_err;
    for (size_t p = 0; p < plans.size(); p++) {
        R.stage = "variant pack / execute";
        void *ws = NULL;
        if (wss[p] > 0) {
            if (cudaMalloc(&ws, wss[p]) != cudaSuccess) { cudaGetLastError(); exec_err += "workspace alloc failed; "; continue; }
        }
        cudnnBackendDescriptor_t vp;
        if (!make(D, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp)) return false;
        TRYC(qs_cuda_cg_variant_pack, vp, (int64_t)uids.size(), uids.data(), ptrs.data(), ws);
        cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
        int nw = plans.size() == 1 ? warmup : 2, ni = plans.size() == 1 ? iters : 3;
        for (int i = 0; i < nw && st == CUDNN_STATUS_SUCCESS; i++) st = cudnnBackendExecute(h, plans[p], vp);
        std::vector<double> t;
        for (int i = 0; i < ni && st == CUDNN_STATUS_SUCCESS; i++) {
            CK(cudaEventRecord(e0));
            st = cudnnBackendExecute(h, plans[p], vp);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
            t.push_back(ms);
        }
        CK(cudaDeviceSynchronize());
        if (st != CUDNN_STATUS_SUCCESS) {
            char msg[1024]; msg[0] = 0; cudnnGetLastErrorString(msg, sizeof msg);
            exec_err += std::string("cudnnBackendExecute -> ") + cudnnGetErrorString(st) + ": " + msg + "; ";
            if (ws) CK(cudaFree(ws));
            continue;
        }
        std::sort(t.begin(), t.end());
        double med = t[t.size() / 2];
        if (med < best) { best = med; bi = (int)p; }
        if (ws) CK(cudaFree(ws));
    }
    if (bi < 0) { g_err = exec_err; return false; }
    if (plans.size() > 1) { /* full timing of the fastest plan */
        void *ws = NULL;
        if (wss[bi] > 0) CK(cudaMalloc(&ws, wss[bi]));
        cudnnBackendDescriptor_t vp;
        if (!make(D, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp)) return false;
        TRYC(qs_cuda_cg_variant_pack, vp, (int64_t)uids.size(), uids.data(), ptrs.data(), ws);
        for (int i = 0; i < warmup; i++) TRY(cudnnBackendExecute(h, plans[bi], vp));
        std::vector<double> t;
        for (int i = 0; i < iters; i++) {
            CK(cudaEventRecord(e0));
            TRY(cudnnBackendExecute(h, plans[bi], vp));
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
            t.push_back(ms);
        }
        std::sort(t.begin(), t.end());
        best = t[t.size() / 2];
        if (ws) CK(cudaFree(ws));
    }
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
    double flops = 2.0 * S.n * S.k * S.c * S.h * S.w * 9.0;
    R.ok = true; R.ms = best; R.tflops = flops / (best * 1e-3) / 1e12; R.ws = wss[bi]; R.engine = names[bi];
    R.stage = "done";
    return true;
}

int main(int argc, char **argv) {
    int iters = 20, warmup = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else { fprintf(stderr, "usage: %s [--iters N>=10] [--warmup N]\n", argv[0]); return 2; }
    }
    if (iters < 10) iters = 10;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int rt = 0, drv = 0;
    CK(cudaRuntimeGetVersion(&rt)); CK(cudaDriverGetVersion(&drv));
    cudnnHandle_t h;
    CKD(cudnnCreate(&h));

    const Shape shapes[4] = {{256, 64, 64, 56, 56}, {256, 128, 128, 28, 28}, {256, 256, 256, 14, 14}, {256, 512, 512, 7, 7}};
    size_t max_act = 0, max_w = 0;
    for (auto &s : shapes) { max_act = std::max(max_act, (size_t)(s.n * s.c * s.h * s.w)); max_w = std::max(max_w, (size_t)(s.k * s.c * 9)); }
    Bufs B;
    CK(cudaMalloc(&B.x, max_act * 4)); CK(cudaMalloc(&B.y, max_act * 4)); CK(cudaMalloc(&B.w, max_w * 4));
    for (int i = 0; i < 3; i++) {
        CK(cudaMalloc(&B.s[i], 4));
        float one = 1.0f; CK(cudaMemcpy(B.s[i], &one, 4, cudaMemcpyHostToDevice));
    }

    const Variant bf16v[1] = {{"plain", CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, false}};
    const Variant fp8v[5] = {{"out_f32", CUDNN_DATA_FP8_E4M3, CUDNN_DATA_FLOAT, false},
                             {"out_bf16", CUDNN_DATA_FP8_E4M3, CUDNN_DATA_BFLOAT16, false},
                             {"out_fp8", CUDNN_DATA_FP8_E4M3, CUDNN_DATA_FP8_E4M3, false},
                             {"scaled_fp8", CUDNN_DATA_FP8_E4M3, CUDNN_DATA_FP8_E4M3, true},
                             {"scaled_bf16", CUDNN_DATA_FP8_E4M3, CUDNN_DATA_BFLOAT16, true}};

    time_t now = time(NULL);
    char date[64]; strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    printf("{\n  \"bench\": \"bench_conv_cudnn\",\n  \"date\": \"%s\",\n  \"device\": \"%s\",\n  \"sm\": \"%d.%d\",\n"
           "  \"cuda_runtime\": %d,\n  \"cuda_driver\": %d,\n  \"cudnn_version\": %zu,\n  \"cudnn_header_version\": %d,\n"
           "  \"iters\": %d,\n  \"warmup\": %d,\n  \"layout\": \"NHWC activations, KRSC filters, 3x3 pad 1 stride 1, fp32 compute\",\n"
           "  \"results\": [",
           date, prop.name, prop.major, prop.minor, rt, drv, cudnnGetVersion(), CUDNN_VERSION, iters, warmup);
    bool first = true;
    for (int prec = 0; prec < 2; prec++) {
        const Variant *vs = prec == 0 ? bf16v : fp8v;
        int nv = prec == 0 ? 1 : 5;
        for (int d = 0; d < 3; d++)
            for (auto &s : shapes) {
                /* fill inputs in the input dtype */
                int kind = prec == 0 ? 0 : 1;
                fill<<<1024, 256>>>(B.x, s.n * s.c * s.h * s.w, 1, kind);
                fill<<<1024, 256>>>(B.w, s.k * s.c * 9, 2, kind);
                fill<<<1024, 256>>>(B.y, s.n * s.k * s.h * s.w, 3, kind);
                CK(cudaGetLastError());
                CK(cudaDeviceSynchronize());
                double flops = 2.0 * s.n * s.k * s.c * s.h * s.w * 9.0;
                std::string vj; bool any = false; Result best;
                std::string best_name;
                for (int v = 0; v < nv; v++) {
                    Result R; g_err.clear();
                    bool ok = build_and_run(h, (Dir)d, s, vs[v], B, warmup, iters, R);
                    if (!ok) R.err = g_err;
                    char b[512];
                    snprintf(b, sizeof b, "%s\n        {\"variant\": \"%s\", \"supported\": %s, \"engine_configs\": %d, \"plans_finalized\": %d",
                             v ? "," : "", vs[v].name, ok ? "true" : "false", R.n_cfgs, R.n_plans);
                    vj += b;
                    if (ok) {
                        snprintf(b, sizeof b, ", \"median_ms\": %.4f, \"tflops\": %.1f, \"workspace_bytes\": %lld, \"engine\": \"%s\"}",
                                 R.ms, R.tflops, (long long)R.ws, R.engine.c_str());
                        vj += b;
                        if (!any || R.ms < best.ms) { best = R; best_name = vs[v].name; }
                        any = true;
                    } else {
                        vj += ", \"failed_at\": \"" + json_escape(R.stage) + "\", \"status\": \"" + json_escape(R.err) + "\"}";
                    }
                }
                printf("%s\n    {\"precision\": \"%s\", \"direction\": \"%s\", \"N\": %lld, \"C\": %lld, \"K\": %lld, \"H\": %lld, \"W\": %lld, "
                       "\"gflop\": %.2f, \"supported\": %s",
                       first ? "" : ",", prec ? "fp8" : "bf16", dir_name[d], (long long)s.n, (long long)s.c, (long long)s.k,
                       (long long)s.h, (long long)s.w, flops / 1e9, any ? "true" : "false");
                if (any) printf(", \"best_variant\": \"%s\", \"median_ms\": %.4f, \"tflops\": %.1f", best_name.c_str(), best.ms, best.tflops);
                printf(",\n      \"variants\": [%s]}", vj.c_str());
                fflush(stdout);
                first = false;
            }
    }
    printf("\n  ]\n}\n");
    CKD(cudnnDestroy(h));
    return 0;
}
