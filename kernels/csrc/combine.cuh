// Deterministic combine of the per-split partial states: for each query row, the splits
// are merged in split order with exact log2-domain rescaling, and the output is rounded
// to bf16 once. One warp per (token, head) row.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "verify_params.h"

namespace kdtree {

constexpr int kCombineWarps = 4;

// The request that owns token t (binary search in qo_indptr), or -1 when t belongs to no
// request or lies past its request's max_len_extend rows (never computed).
__device__ __forceinline__ int64_t owning_request(const VerifyParams& p, int64_t t) {
  auto at = [&](int64_t i) {
    return p.qo_is_64 ? static_cast<const int64_t*>(p.qo_indptr)[i]
                      : static_cast<int64_t>(static_cast<const int32_t*>(p.qo_indptr)[i]);
  };
  if (t < at(0) || t >= at(p.bs)) return -1;
  int64_t lo = 0, hi = p.bs;  // at(lo) <= t < at(hi)
  while (hi - lo > 1) {
    int64_t mid = (lo + hi) / 2;
    if (at(mid) <= t) lo = mid; else hi = mid;
  }
  return t - at(lo) < p.n_max ? lo : -1;
}

__global__ void __launch_bounds__(kCombineWarps * 32)
verify_combine_kernel(const VerifyParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t flat = static_cast<int64_t>(blockIdx.x) * kCombineWarps + warp;  // t * H + h
  if (flat >= p.total_tokens * p.heads) return;
  const int64_t t = flat / p.heads, h = flat % p.heads;
  if (owning_request(p, t) < 0) return;
  const int64_t stride = p.total_tokens * p.heads;

  float m = -INFINITY;
  for (int64_t s = 0; s < p.num_splits; ++s) m = fmaxf(m, p.ws_ml[(s * stride + flat) * 2]);
  float acc[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) acc[i] = 0.f;
  float l = 0.f;
  if (m != -INFINITY) {
    for (int64_t s = 0; s < p.num_splits; ++s) {
      float ms = p.ws_ml[(s * stride + flat) * 2];
      if (ms == -INFINITY) continue;  // an empty split: its partial is not read at all
      float w = exp2f(ms - m);
      l += w * p.ws_ml[(s * stride + flat) * 2 + 1];
      const float4* src = reinterpret_cast<const float4*>(p.ws_acc + (s * stride + flat) * 512);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float4 v = src[lane + 32 * i];
        acc[4 * i] += w * v.x;
        acc[4 * i + 1] += w * v.y;
        acc[4 * i + 2] += w * v.z;
        acc[4 * i + 3] += w * v.w;
      }
    }
  }
  float inv = l > 0.f ? 1.f / l : 0.f;
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.o) + t * p.o_stride_t + h * p.o_stride_h;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int64_t col = 4 * (lane + 32 * i);
    __nv_bfloat162 lo = __floats2bfloat162_rn(acc[4 * i] * inv, acc[4 * i + 1] * inv);
    __nv_bfloat162 hi = __floats2bfloat162_rn(acc[4 * i + 2] * inv, acc[4 * i + 3] * inv);
    *reinterpret_cast<__nv_bfloat162*>(out + col) = lo;
    *reinterpret_cast<__nv_bfloat162*>(out + col + 2) = hi;
  }
  if (p.lse && lane == 0)
    p.lse[t * p.lse_stride_t + h] = l > 0.f ? (m + log2f(l)) * 0.69314718055994531f : -INFINITY;
}

}  // namespace kdtree
