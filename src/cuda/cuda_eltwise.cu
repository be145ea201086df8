/* src/cuda/cuda_eltwise.cu — defines: the flat element-wise ops of the CUDA backend, FP32: ReLU
 * and its backward, SiLU and its backward, add (with a fused ReLU; F32 or BF16 inputs), accumulate
 * and scale, through the map kernel of cuda_map.cuh (the CPU's element formulas, bit for bit, up
 * to expf: see there). */
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "cuda/cuda_map.cuh"

namespace {

using qs_cuda::args_check;
using qs_cuda::with_f32_or_bf16;

/* y = x < 0 ? 0 : x (NaN and -0 pass through, like the CPU and torch.relu). */
struct ReluFwd {
    const float *x;
    float *y;
    __device__ static float f(float v) { return v < 0.0f ? 0.0f : v; }
    __device__ void one(int64_t i) const { y[i] = f(x[i]); }
    __device__ void four(int64_t i) const {
        float4 v = ld4(x, i);
        v.x = f(v.x), v.y = f(v.y), v.z = f(v.z), v.w = f(v.w);
        st4(y, i, v);
    }
};

template <bool ACC, typename G>
struct ReluBwd {
    const float *y;
    const G *dy;
    float *dx;
    __device__ static float f(float yv, float g, float old) {
        float d = yv > 0.0f ? g : 0.0f;
        return ACC ? __fadd_rn(old, d) : d;
    }
    __device__ void one(int64_t i) const { dx[i] = f(y[i], ld1(dy, i), ACC ? dx[i] : 0.0f); }
    __device__ void four(int64_t i) const {
        const float4 a = ld4(y, i), g = ld4(dy, i);
        const float4 o = ACC ? ld4(dx, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        st4(dx, i, make_float4(f(a.x, g.x, o.x), f(a.y, g.y, o.y), f(a.z, g.z, o.z), f(a.w, g.w, o.w)));
    }
};

/* y = x·σ(x), −0 where σ = 0 (x < −88.7, −∞ included). */
struct SiluFwd {
    const float *x;
    float *y;
    __device__ static float f(float v) {
        float om;
        const float sg = logistic(v, &om);
        return sg == 0.0f ? -0.0f : __fmul_rn(v, sg);
    }
    __device__ void one(int64_t i) const { y[i] = f(x[i]); }
    __device__ void four(int64_t i) const {
        float4 v = ld4(x, i);
        v.x = f(v.x), v.y = f(v.y), v.z = f(v.z), v.w = f(v.w);
        st4(y, i, v);
    }
};

/* dx (+)= dy·σ·(1 + t), t = x·(1 − σ): t = 0 where 1 − σ is, the factor −0 where σ is (±∞ included). */
template <bool ACC>
struct SiluBwd {
    const float *x, *dy;
    float *dx;
    __device__ static float f(float v, float g, float old) {
        float om;
        const float sg = logistic(v, &om), t = om == 0.0f ? 0.0f : __fmul_rn(v, om);
        const float d = __fmul_rn(g, sg == 0.0f ? -0.0f : __fmul_rn(sg, __fadd_rn(1.0f, t)));
        return ACC ? __fadd_rn(old, d) : d;
    }
    __device__ void one(int64_t i) const { dx[i] = f(x[i], dy[i], ACC ? dx[i] : 0.0f); }
    __device__ void four(int64_t i) const {
        const float4 a = ld4(x, i), g = ld4(dy, i);
        const float4 o = ACC ? ld4(dx, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        st4(dx, i, make_float4(f(a.x, g.x, o.x), f(a.y, g.y, o.y), f(a.z, g.z, o.z), f(a.w, g.w, o.w)));
    }
};

/* y = a + b, or (a + b) > 0 ? a + b : 0 with RELU (NaN → 0, as the CPU's fused Add→ReLU); A, B:
 * a's and b's element types (float, or uint16_t BF16 bits). */
template <bool RELU, typename A, typename B>
struct AddFwd {
    const A *a;
    const B *b;
    float *y;
    __device__ static float f(float u, float v) {
        float r = __fadd_rn(u, v);
        return RELU ? (r > 0.0f ? r : 0.0f) : r;
    }
    __device__ void one(int64_t i) const { y[i] = f(ld1(a, i), ld1(b, i)); }
    __device__ void four(int64_t i) const {
        const float4 u = ld4(a, i), v = ld4(b, i);
        st4(y, i, make_float4(f(u.x, v.x), f(u.y, v.y), f(u.z, v.z), f(u.w, v.w)));
    }
};

/* dst += src. */
struct AccAdd {
    const float *src;
    float *dst;
    __device__ void one(int64_t i) const { dst[i] = __fadd_rn(dst[i], src[i]); }
    __device__ void four(int64_t i) const {
        const float4 u = ld4(dst, i), v = ld4(src, i);
        st4(dst, i, make_float4(__fadd_rn(u.x, v.x), __fadd_rn(u.y, v.y), __fadd_rn(u.z, v.z), __fadd_rn(u.w, v.w)));
    }
};

/* x *= alpha. */
struct Scale {
    float *x;
    float alpha;
    __device__ void one(int64_t i) const { x[i] = __fmul_rn(x[i], alpha); }
    __device__ void four(int64_t i) const {
        float4 v = ld4(x, i);
        v.x = __fmul_rn(v.x, alpha), v.y = __fmul_rn(v.y, alpha), v.z = __fmul_rn(v.z, alpha),
        v.w = __fmul_rn(v.w, alpha);
        st4(x, i, v);
    }
};

/* dx = mask ? dy·scale : 0, or dx += that (four() also needs mask 4-byte aligned). */

} // namespace

/* y = max(x, 0) elementwise (NaN stays NaN; y may alias x). */
qs_status qs_cuda_relu_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y) {
    QS_TRY(args_check("relu_forward", n, {x, y}));
    return launch_map(be, s, n, aligned16({x, y}), ReluFwd{x, y}, "relu_forward");
}

/* dx = dy·[y > 0], or dx += that with accumulate; dy F32 or BF16 (dy_dt). */
qs_status qs_cuda_relu_backward(qs_backend *be, qs_stream *s, int64_t n, const float *y, const void *dy,
                                qs_dtype dy_dt, float *dx, bool accumulate) {
    QS_TRY(args_check("relu_backward", n, {y, dy, dx}));
    QS_TRY(qs_dy_dtype_check("relu_backward", dy_dt));
    const bool vec = aligned16({y, dy, dx});
    if (dy_dt == QS_BF16) {
        const uint16_t *g = static_cast<const uint16_t *>(dy);
        if (accumulate) return launch_map(be, s, n, vec, ReluBwd<true, uint16_t>{y, g, dx}, "relu_backward");
        return launch_map(be, s, n, vec, ReluBwd<false, uint16_t>{y, g, dx}, "relu_backward");
    }
    const float *g = static_cast<const float *>(dy);
    if (accumulate) return launch_map(be, s, n, vec, ReluBwd<true, float>{y, g, dx}, "relu_backward");
    return launch_map(be, s, n, vec, ReluBwd<false, float>{y, g, dx}, "relu_backward");
}

/* y = x·σ(x) elementwise (y may alias x). */
qs_status qs_cuda_silu_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y) {
    QS_TRY(args_check("silu_forward", n, {x, y}));
    return launch_map(be, s, n, aligned16({x, y}), SiluFwd{x, y}, "silu_forward");
}

/* dx = dy·σ·(1 + x·(1 − σ)) from the forward's input x, or dx += that with accumulate. */
qs_status qs_cuda_silu_backward(qs_backend *be, qs_stream *s, int64_t n, const float *x, const float *dy, float *dx,
                                bool accumulate) {
    QS_TRY(args_check("silu_backward", n, {x, dy, dx}));
    const bool vec = aligned16({x, dy, dx});
    if (accumulate) return launch_map(be, s, n, vec, SiluBwd<true>{x, dy, dx}, "silu_backward");
    return launch_map(be, s, n, vec, SiluBwd<false>{x, dy, dx}, "silu_backward");
}

/* y = a + b, or max(a + b, 0) with relu (y may alias an F32 a or b); a, b F32 or BF16. */
qs_status qs_cuda_add_forward(qs_backend *be, qs_stream *s, int64_t n, const void *a, qs_dtype a_dt, const void *b,
                              qs_dtype b_dt, float *y, bool relu) {
    QS_TRY(args_check("add_forward", n, {a, b, y}));
    QS_TRY(qs_f32_or_bf16_check("add_forward", "first input dtype (a_dt)", a_dt));
    QS_TRY(qs_f32_or_bf16_check("add_forward", "second input dtype (b_dt)", b_dt));
    const bool vec = aligned16({a, b, y});
    qs_status st = QS_OK;
    with_f32_or_bf16(a, a_dt, [&](auto ap) {
        with_f32_or_bf16(b, b_dt, [&](auto bp) {
            using A = std::remove_cv_t<std::remove_pointer_t<decltype(ap)>>;
            using B = std::remove_cv_t<std::remove_pointer_t<decltype(bp)>>;
            st = relu ? launch_map(be, s, n, vec, AddFwd<true, A, B>{ap, bp, y}, "add_forward")
                      : launch_map(be, s, n, vec, AddFwd<false, A, B>{ap, bp, y}, "add_forward");
        });
    });
    return st;
}

/* dst = src (a device copy; nothing when src == dst) or dst += src. */
qs_status qs_cuda_accumulate(qs_backend *be, qs_stream *s, int64_t n, const float *src, float *dst, bool accumulate) {
    QS_TRY(args_check("accumulate", n, {src, dst}));
    if (n == 0) return QS_OK;
    if (!accumulate) {
        if (src != dst)
            QS_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, stream_of(be, s)));
        return QS_OK;
    }
    return launch_map(be, s, n, aligned16({src, dst}), AccAdd{src, dst}, "accumulate");
}

/* x *= alpha. */
qs_status qs_cuda_scale(qs_backend *be, qs_stream *s, int64_t n, float *x, float alpha) {
    QS_TRY(args_check("scale", n, {x}));
    return launch_map(be, s, n, aligned16({x}), Scale{x, alpha}, "scale");
}
