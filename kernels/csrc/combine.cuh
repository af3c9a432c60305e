// Deterministic combine of the per-split partial states. One CTA per (query row, 128-column
// chunk): 8 warps each merge a fixed subset of the splits (warp w: splits w, w+8, ...,
// four loads in flight) with exact log2-domain weights against the global maximum, then
// warp 0 adds the 8 partial sums in warp order and rounds to bf16 once. Splits that saw nothing (m = -inf)
// are skipped without reading their partial output.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "split_plan.h"
#include "verify_params.h"

namespace kdtree {

constexpr int kCombineWarps = 8;
constexpr int kCombineChunks = 4;  // 512 columns = 4 chunks x 32 lanes x float4

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
  __shared__ float4 part[kCombineWarps][32];
  __shared__ float part_l[kCombineWarps];
  static_assert(kMaxSplitsTiled <= 32 * kCombineWarps && kMaxSplits <= 32 * kCombineWarps,
                "one weight per lane: at most 256 splits");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t flat = blockIdx.x;  // t * H + h
  const int chunk = blockIdx.y;
  if (flat >= p.total_tokens * p.heads) return;
  const int64_t t = flat / p.heads, h = flat % p.heads;
  if (owning_request(p, t) < 0) return;
  const int64_t stride = p.total_tokens * p.heads;

  float m = -INFINITY;
  for (int64_t s = lane; s < p.num_splits; s += 32) m = fmaxf(m, p.ws_ml[(s * stride + flat) * 2]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, off));

  // lane i holds the weight of this warp's i-th split (warp + 8 i); splits that saw
  // nothing weigh 0 and their partial output is never read
  const int64_t my_split = warp + static_cast<int64_t>(kCombineWarps) * lane;
  float w_lane = 0.f, l_lane = 0.f;
  bool live_lane = false;
  if (m != -INFINITY && my_split < p.num_splits) {
    const float ms = p.ws_ml[(my_split * stride + flat) * 2];
    if (ms != -INFINITY) {
      live_lane = true;
      w_lane = exp2f(ms - m);
      l_lane = w_lane * p.ws_ml[(my_split * stride + flat) * 2 + 1];
    }
  }
  float l = l_lane;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) l += __shfl_xor_sync(0xffffffff, l, off);
  const unsigned live = __ballot_sync(0xffffffff, live_lane);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  const float* base = p.ws_acc + flat * 512 + chunk * 128 + 4 * lane;
  for (int i0 = 0; i0 < 32; i0 += 4) {
    if (!(live >> i0)) break;  // no live split at or after i0
    float4 v[4];
    float w[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {  // four independent loads in flight
      w[u] = __shfl_sync(0xffffffff, w_lane, i0 + u);
      const int64_t s = warp + static_cast<int64_t>(kCombineWarps) * (i0 + u);
      v[u] = (live >> (i0 + u)) & 1u ? *reinterpret_cast<const float4*>(base + s * stride * 512)
                                     : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (!((live >> (i0 + u)) & 1u)) continue;
      acc.x += w[u] * v[u].x;
      acc.y += w[u] * v[u].y;
      acc.z += w[u] * v[u].z;
      acc.w += w[u] * v[u].w;
    }
  }
  part[warp][lane] = acc;
  if (lane == 0) part_l[warp] = l;
  __syncthreads();
  if (warp != 0) return;
  float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) {
    sum.x += part[w][lane].x;
    sum.y += part[w][lane].y;
    sum.z += part[w][lane].z;
    sum.w += part[w][lane].w;
    total += part_l[w];
  }
  const float inv = total > 0.f ? 1.f / total : 0.f;
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.o) + t * p.o_stride_t + h * p.o_stride_h +
                       chunk * 128 + 4 * lane;
  *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(sum.x * inv, sum.y * inv);
  *reinterpret_cast<__nv_bfloat162*>(out + 2) = __floats2bfloat162_rn(sum.z * inv, sum.w * inv);
  if (p.lse && chunk == 0 && lane == 0)
    p.lse[t * p.lse_stride_t + h] = total > 0.f ? (m + log2f(total)) * 0.69314718055994531f : -INFINITY;
}

}  // namespace kdtree
