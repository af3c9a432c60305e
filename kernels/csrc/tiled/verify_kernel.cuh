// Tree-verify attention for absorbed MLA, tiled path: mma.sync m16n8k16 (bf16 in, fp32
// accumulate), 8 warps, BM = 32 or 64 query rows per CTA (draft tokens x heads folded
// into the tile, so one request's latent KV is read once per row block for all heads and
// drafts), KV tiles of 32 positions streamed through a 4-stage cp.async pipeline (slot indices fetched a tile ahead).
//
// Warp w owns rows [16*(w % G), +16) of the block (G = BM/16 row groups) and value
// columns [512/C * (w / G), +512/C) (C = 8/G column slices). S = Q.K^T is split over the
// slices by position (no warp recomputes another's scores); the row maxima are merged
// through shared memory, P is staged there as bf16 and O += P.V reads it back. The running
// sum l keeps the fp32 probabilities; the output is rounded to bf16 once.
//
// Needs ~225 KB of shared memory per CTA (Hopper's opt-in limit is 227 KB); parts with
// less use the portable path (mma_sync/verify_kernel.cuh).
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "../common/grid_dependency.cuh"
#include "../common/mma.cuh"
#include "../common/request_extent.cuh"
#include "../common/row_result.cuh"
#include "../split_plan.h"
#include "../verify_params.h"

namespace kdtree {
namespace tiled {

using bf16 = __nv_bfloat16;

constexpr int kLd = kHeadDim + 8;      // padded shared row (bf16): conflict-free ldmatrix
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per K row
constexpr int kPLd = kBlockN + 8;      // P row stride (bf16)
constexpr int kPPlanes = 1;
constexpr int kStages = 4;             // KV tiles in flight + the one being read

template <int BM>
struct Tile {
  static constexpr int kRowGroups = BM / 16;
  static constexpr int kColSlices = kWarps / kRowGroups;
  static constexpr int kCols = kValueDim / kColSlices;   // value columns per warp
  static constexpr int kColTiles = kCols / 8;
  static constexpr int kPos = kBlockN / kColSlices;      // score positions per warp
  static constexpr int kPosTiles = kPos / 8;
  static constexpr int kSmemBytes = (BM + kStages * kBlockN) * kLd * 2 +
                                    kPPlanes * BM * kPLd * 2 + 2 * kColSlices * BM * 4;
  static_assert(kPosTiles == 1 || kPosTiles == 2, "score tile per warp must be 8 or 16 positions");
  static_assert(kColTiles % 2 == 0, "value columns per warp must be a multiple of 16");
};

// Stage KV positions [j0, j0 + kBlockN) with 16-byte cp.async chunks, 8 threads per row;
// `source` is kv_source() of this thread's row.
__device__ __forceinline__ void load_kv_tile(const VerifyParams& p, const RequestExtent& ext,
                                             bf16* stage, int64_t j0, int64_t source, int tid) {
  const int r = tid / 8, c0 = tid % 8;
  const bf16* src = static_cast<const bf16*>(p.k_buffer);
  int bytes = 16;
  if (source >= 0)
    src += source * p.kb_stride;
  else if (source == -2)
    src = static_cast<const bf16*>(p.k_extend) + (ext.qo_start + j0 + r - ext.prefix) * p.ke_stride_t;
  else
    bytes = 0;
  bf16* dst = stage + r * kLd;
#pragma unroll
  for (int c = c0; c < kChunks; c += 8) cp_async_16(dst + c * 8, bytes ? src + c * 8 : src, bytes);
}

template <int BM>
__global__ void __launch_bounds__(kThreads, 1)
verify_tiled_kernel(const VerifyParams p) {
  wait_for_prior_grids();  // before any global access (inputs, workspace)
  using T = Tile<BM>;
  static_assert(kBlockN * 8 == kThreads, "one KV row per 8 threads");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* q_s = reinterpret_cast<bf16*>(smem_raw);
  bf16* kv_s = q_s + BM * kLd;
  bf16* p_s = kv_s + kStages * kBlockN * kLd;
  float* red_max = reinterpret_cast<float*>(p_s + kPPlanes * BM * kPLd);
  float* red_sum = red_max + T::kColSlices * BM;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int rg = warp % T::kRowGroups, cs = warp / T::kRowGroups;
  const int64_t H = p.heads;

  CtaWork work;
  if (!cta_work(p, BM, kMinChunkTiled, kBlockN, &work)) return;
  const auto& [ext, rows, row0, length, split, j_begin, j_end, mask_base, half_idle] = work;
  const int64_t prefix = ext.prefix, qo_start = ext.qo_start;

  const int lr_a = rg * 16 + g, lr_b = lr_a + 8;  // this thread's two rows, local
  const int64_t row_a = row0 + lr_a, row_b = row0 + lr_b;
  const bool valid_a = row_a < rows, valid_b = row_b < rows;
  const int64_t tok_a = valid_a ? row_a / H : 0, tok_b = valid_b ? row_b / H : 0;

  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;
  float acc[T::kColTiles][4];
#pragma unroll
  for (int i = 0; i < T::kColTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  const int64_t num_tiles = j_begin < j_end ? ceil_div(j_end - j_begin, kBlockN) : 0;
  if (num_tiles > 0) {
    for (int idx = tid; idx < BM * kChunks; idx += kThreads) {  // Q rows (zeros past `rows`)
      const int r = idx / kChunks, c = idx % kChunks;
      const int64_t row = row0 + r;
      const bf16* src = static_cast<const bf16*>(p.q);
      int bytes = 0;
      if (row < rows) {
        src += (qo_start + row / H) * p.q_stride_t + (row % H) * p.q_stride_h + c * 8;
        bytes = 16;
      }
      cp_async_16(q_s + r * kLd + c * 8, src, bytes);
    }
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < num_tiles) {
        const int64_t j0 = j_begin + s * kBlockN;
        load_kv_tile(p, ext, kv_s + s * kBlockN * kLd, j0, kv_source(p, ext, j0 + tid / 8, j_end, tid % 8 == 0), tid);
      }
      cp_async_commit();
    }
  }
  // the source of this thread's row in the next tile to stage (consumed one iteration later)
  int64_t next_source = kStages - 1 < num_tiles
      ? kv_source(p, ext, j_begin + (kStages - 1) * kBlockN + tid / 8, j_end, tid % 8 == 0) : -1;

  const float scale = static_cast<float>(p.scale_log2);
  const bf16* q_frag = q_s + (rg * 16 + (lane % 8) + 8 * ((lane / 8) % 2)) * kLd + 8 * (lane / 16);
  const bf16* p_frag = p_s + (rg * 16 + (lane % 8) + 8 * ((lane / 8) % 2)) * kPLd + 8 * (lane / 16);
  const int k_row = T::kPosTiles == 2 ? cs * T::kPos + (lane % 8) + 8 * (lane / 16)
                                      : cs * T::kPos + (lane % 8);
  const int k_col = 8 * ((lane / 8) % 2);
  const int v_row = (lane % 8) + 8 * ((lane / 8) % 2);
  const int v_col = cs * T::kCols + 8 * (lane / 16);

  for (int64_t it = 0; it < num_tiles; ++it) {
    bf16* kv = kv_s + (it % kStages) * kBlockN * kLd;
    const int64_t j0 = j_begin + it * kBlockN;
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile `it` landed for every thread; tile it-1 is no longer read
    {
      const int64_t next = it + kStages - 1;
      if (next < num_tiles) {
        load_kv_tile(p, ext, kv_s + (next % kStages) * kBlockN * kLd, j_begin + next * kBlockN, next_source, tid);
        next_source = next + 1 < num_tiles
            ? kv_source(p, ext, j_begin + (next + 1) * kBlockN + tid / 8, j_end, tid % 8 == 0) : -1;
      }
      cp_async_commit();
    }

    // -- S = Q.K^T: this warp's 16 rows x kPos positions, over 576 dims
    float s[T::kPosTiles][4], s2[T::kPosTiles][4];  // even / odd k-steps: two MMA chains
#pragma unroll
    for (int n = 0; n < T::kPosTiles; ++n)
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = s2[n][0] = s2[n][1] = s2[n][2] = s2[n][3] = 0.f;
    const bf16* k_frag = kv + k_row * kLd + k_col;
#pragma unroll 2
    for (int kk = 0; kk < kHeadDim; kk += 32) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float (*acc_s)[4] = half ? s2 : s;
        uint32_t a[4];
        ldmatrix_x4(a, q_frag + kk + 16 * half);
        if constexpr (T::kPosTiles == 2) {
          uint32_t kb[4];
          ldmatrix_x4(kb, k_frag + kk + 16 * half);
          mma_bf16(acc_s[0], a, kb[0], kb[1]);
          mma_bf16(acc_s[1], a, kb[2], kb[3]);
        } else {
          uint32_t kb[2];
          ldmatrix_x2(kb, k_frag + kk + 16 * half);
          mma_bf16(acc_s[0], a, kb[0], kb[1]);
        }
      }
    }
#pragma unroll
    for (int n = 0; n < T::kPosTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] += s2[n][e];

    // -- scale and mask (log2 units); row maxima of this warp's positions
    const bool plain = j0 + kBlockN <= prefix && j0 + kBlockN <= j_end;  // all prefix, all in range
    float tmax_a = -INFINITY, tmax_b = -INFINITY;
#pragma unroll
    for (int n = 0; n < T::kPosTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool lower = e >= 2;
        bool visible = lower ? valid_b : valid_a;
        if (!plain) {
          const int64_t j = j0 + cs * T::kPos + n * 8 + 2 * t + (e & 1);
          visible = visible && j < j_end;
          if (visible && j >= prefix)
            visible = draft_visible(p, mask_base, length, prefix, lower ? tok_b : tok_a, j - prefix);
        }
        const float v = visible ? s[n][e] * scale : -INFINITY;
        s[n][e] = v;
        if (lower) tmax_b = fmaxf(tmax_b, v); else tmax_a = fmaxf(tmax_a, v);
      }
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      tmax_a = fmaxf(tmax_a, __shfl_xor_sync(0xffffffff, tmax_a, off));
      tmax_b = fmaxf(tmax_b, __shfl_xor_sync(0xffffffff, tmax_b, off));
    }
    if (t == 0) {
      red_max[cs * BM + lr_a] = tmax_a;
      red_max[cs * BM + lr_b] = tmax_b;
    }
    __syncthreads();  // (A) every slice's maxima are in; every warp is done reading K

    // -- online softmax over the whole tile (every slice computes the same maxima)
#pragma unroll
    for (int c = 0; c < T::kColSlices; ++c) {
      tmax_a = fmaxf(tmax_a, red_max[c * BM + lr_a]);
      tmax_b = fmaxf(tmax_b, red_max[c * BM + lr_b]);
    }
    const float new_a = fmaxf(m_a, tmax_a), new_b = fmaxf(m_b, tmax_b);
    const float base_a = new_a == -INFINITY ? 0.f : new_a, base_b = new_b == -INFINITY ? 0.f : new_b;
    const float alpha_a = exp2f(m_a - base_a), alpha_b = exp2f(m_b - base_b);
    m_a = new_a;
    m_b = new_b;
    float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
    for (int n = 0; n < T::kPosTiles; ++n) {
      s[n][0] = exp2f(s[n][0] - base_a);
      s[n][1] = exp2f(s[n][1] - base_a);
      s[n][2] = exp2f(s[n][2] - base_b);
      s[n][3] = exp2f(s[n][3] - base_b);
      sum_a += s[n][0] + s[n][1];
      sum_b += s[n][2] + s[n][3];
      const int pos = cs * T::kPos + n * 8 + 2 * t;
      *reinterpret_cast<uint32_t*>(p_s + lr_a * kPLd + pos) = pack_bf16(s[n][0], s[n][1]);
      *reinterpret_cast<uint32_t*>(p_s + lr_b * kPLd + pos) = pack_bf16(s[n][2], s[n][3]);
    }
    l_a = l_a * alpha_a + sum_a;
    l_b = l_b * alpha_b + sum_b;
#pragma unroll
    for (int i = 0; i < T::kColTiles; ++i) {
      acc[i][0] *= alpha_a;
      acc[i][1] *= alpha_a;
      acc[i][2] *= alpha_b;
      acc[i][3] *= alpha_b;
    }

    // -- draft positions take their V from v_extend (K was read before (A))
    if (j0 + kBlockN > prefix && j_end > prefix) {
      const int r = tid / 8;
      const int64_t j = j0 + r;
      if (j >= prefix && j < j_end) {
        const bf16* src = static_cast<const bf16*>(p.v_extend) + (qo_start + j - prefix) * p.ve_stride_t;
        for (int c = tid % 8; c < kValueDim / 8; c += 8)
          *reinterpret_cast<uint4*>(kv + r * kLd + c * 8) = *reinterpret_cast<const uint4*>(src + c * 8);
      }
    }
    __syncthreads();  // (B) P and the draft V rows are staged

    // -- O += P.V over this warp's value columns
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks) {
      uint32_t a[4];
      ldmatrix_x4(a, p_frag + ks * 16);
      const bf16* v_frag = kv + (ks * 16 + v_row) * kLd + v_col;
#pragma unroll
      for (int i = 0; i < T::kColTiles; i += 2) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, v_frag + i * 8);
        mma_bf16(acc[i], a, vb[0], vb[1]);
        mma_bf16(acc[i + 1], a, vb[2], vb[3]);
      }
    }
  }
  cp_async_wait<0>();

  // -- row sums: across the quad, then across the column slices
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffff, l_a, off);
    l_b += __shfl_xor_sync(0xffffffff, l_b, off);
  }
  if (t == 0) {
    red_sum[cs * BM + lr_a] = l_a;
    red_sum[cs * BM + lr_b] = l_b;
  }
  __syncthreads();
  l_a = 0.f;
  l_b = 0.f;
#pragma unroll
  for (int c = 0; c < T::kColSlices; ++c) {
    l_a += red_sum[c * BM + lr_a];
    l_b += red_sum[c * BM + lr_b];
  }

  // -- write: final output (one split) or the split's partial state
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (!(half ? valid_b : valid_a)) continue;
    const int64_t row = half ? row_b : row_a;
    const int64_t tok = qo_start + row / H, h = row % H;
    const float m = half ? m_b : m_a, l = half ? l_b : l_a;
    const int d0 = cs * T::kCols + 2 * t;  // this thread's columns: d0 + 8 i, + 1
    write_row_result(
        p, split, tok, h, m, l, cs == 0 && t == 0,
        [&](bf16* dst, float inv) {
          bf16* out = dst + d0;
#pragma unroll
          for (int i = 0; i < T::kColTiles; ++i)
            *reinterpret_cast<__nv_bfloat162*>(out + i * 8) =
                __floats2bfloat162_rn(acc[i][half * 2] * inv, acc[i][half * 2 + 1] * inv);
        },
        [&](float* dst) {
          float* ws = dst + d0;
#pragma unroll
          for (int i = 0; i < T::kColTiles; ++i)
            *reinterpret_cast<float2*>(ws + i * 8) = make_float2(acc[i][half * 2], acc[i][half * 2 + 1]);
        });
  }
}

}  // namespace tiled
}  // namespace kdtree
