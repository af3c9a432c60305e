// Tree-verify attention for absorbed MLA, tensor cores through mma.sync m16n8k16 (bf16,
// fp32 accumulate). Compiles for sm_90a and sm_120a.
//
// One CTA = (row block, request, split). A request's query rows are its draft tokens x
// heads (row r = token i * H + head h), so the shared latent KV of a request is read once
// per row block for all heads. 4 warps: warp w owns rows [16*(w/2), +16) of the block and
// value columns [256*(w%2), +256). Each KV tile of 32 positions is staged in shared
// memory with 16-byte loads; S = Q.K^T over 576 dims, online softmax in log2 units,
// then P.V over the first 512 dims of the same staged rows (draft rows are replaced by
// v_extend before P.V). P enters the P.V product as a bf16 hi/lo pair, so P is carried
// to ~16 bits and the output is rounded to bf16 once.
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

constexpr int kLd = kHeadDim + 8;  // padded shared-memory row (bf16): conflict-free fragments
constexpr int kThreads = 128;
constexpr int kColsPerWarp = kValueDim / 2;
constexpr int kColTiles = kColsPerWarp / 8;  // 32 n-tiles of 8 columns
constexpr int kSmemBytes = 2 * kBlockM * kLd * 2;  // Q tile + KV tile, bf16

// Copy `dims` bf16 (a multiple of 8) from global `src` to shared `dst` with 16-byte loads;
// the row is split over `lanes` threads starting at `lane`.
__device__ __forceinline__ void copy_row(__nv_bfloat16* dst, const __nv_bfloat16* src,
                                         int dims, int lane, int lanes) {
  for (int c = lane * 8; c < dims; c += lanes * 8)
    *reinterpret_cast<uint4*>(dst + c) = *reinterpret_cast<const uint4*>(src + c);
}

__device__ __forceinline__ void zero_row(__nv_bfloat16* dst, int dims, int lane, int lanes) {
  for (int c = lane * 8; c < dims; c += lanes * 8)
    *reinterpret_cast<uint4*>(dst + c) = make_uint4(0, 0, 0, 0);
}

__global__ void __launch_bounds__(kThreads)
verify_mma_kernel(const VerifyParams p) {
  wait_for_prior_grids();  // before any global access (inputs, workspace)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* kv_s = q_s + kBlockM * kLd;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t H = p.heads;

  // -- this CTA's work (request extent clamped: no read ever leaves its tensor)
  CtaWork work;
  if (!cta_work(p, kBlockM, 0, kBlockN, &work)) return;
  const auto& [ext, rows, row0, length, split, j_begin, j_end, mask_base, half_idle] = work;
  const int64_t qo_start = ext.qo_start, prefix = ext.prefix;

  // -- rows of this thread: A = row0 + 16*(warp/2) + g, B = A + 8
  const int rg = warp / 2, ch = warp % 2;
  int64_t row_a = row0 + rg * 16 + g, row_b = row_a + 8;
  bool valid_a = row_a < rows, valid_b = row_b < rows;
  int64_t tok_a = valid_a ? row_a / H : 0, tok_b = valid_b ? row_b / H : 0;

  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;
  float acc[kColTiles][4];
#pragma unroll
  for (int i = 0; i < kColTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  if (j_begin < j_end) {
    // -- Q tile: 4 threads per row, 8 rows at a time
    for (int r = tid / 4; r < kBlockM; r += kThreads / 4) {
      int64_t row = row0 + r;
      __nv_bfloat16* dst = q_s + r * kLd;
      if (row < rows) {
        int64_t i = row / H, h = row % H;
        const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(p.q) +
                                   (qo_start + i) * p.q_stride_t + h * p.q_stride_h;
        copy_row(dst, src, kHeadDim, tid % 4, 4);
      } else {
        zero_row(dst, kHeadDim, tid % 4, 4);
      }
    }
  }

  for (int64_t j0 = j_begin; j0 < j_end; j0 += kBlockN) {
    __syncthreads();  // the previous tile is no longer read
    for (int r = tid / 4; r < kBlockN; r += kThreads / 4) {
      int64_t j = j0 + r;
      __nv_bfloat16* dst = kv_s + r * kLd;
      if (j >= j_end) {
        zero_row(dst, kHeadDim, tid % 4, 4);
        continue;
      }
      const __nv_bfloat16* src;
      if (j < prefix) {
        int64_t slot = prefix_slot(p, ext, j, tid % 4 == 0);
        src = static_cast<const __nv_bfloat16*>(p.k_buffer) + slot * p.kb_stride;
      } else {
        src = static_cast<const __nv_bfloat16*>(p.k_extend) + (qo_start + j - prefix) * p.ke_stride_t;
      }
      copy_row(dst, src, kHeadDim, tid % 4, 4);
    }
    __syncthreads();

    // -- S = Q.K^T for 16 rows x 32 positions (4 n-tiles)
    float s[4][4];
#pragma unroll
    for (int n = 0; n < 4; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    const __nv_bfloat16* qa = q_s + (rg * 16 + g) * kLd + 2 * t;
#pragma unroll 4
    for (int kk = 0; kk < kHeadDim; kk += 16) {
      uint32_t a[4];
      a[0] = *reinterpret_cast<const uint32_t*>(qa + kk);
      a[1] = *reinterpret_cast<const uint32_t*>(qa + 8 * kLd + kk);
      a[2] = *reinterpret_cast<const uint32_t*>(qa + kk + 8);
      a[3] = *reinterpret_cast<const uint32_t*>(qa + 8 * kLd + kk + 8);
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        const __nv_bfloat16* kb = kv_s + (n * 8 + g) * kLd + kk + 2 * t;
        mma_bf16(s[n], a, *reinterpret_cast<const uint32_t*>(kb),
                 *reinterpret_cast<const uint32_t*>(kb + 8));
      }
    }

    // -- scale, mask, online softmax (log2 units)
    float tile_max_a = -INFINITY, tile_max_b = -INFINITY;
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int64_t j = j0 + n * 8 + 2 * t + (e & 1);
        bool lower = e >= 2;
        bool row_ok = lower ? valid_b : valid_a;
        int64_t tok = lower ? tok_b : tok_a;
        bool visible = row_ok && j < j_end;
        if (visible && j >= prefix) {
          visible = draft_visible(p, mask_base, length, prefix, tok, j - prefix);
        }
        float v = visible ? s[n][e] * static_cast<float>(p.scale_log2) : -INFINITY;
        s[n][e] = v;
        if (lower) tile_max_b = fmaxf(tile_max_b, v); else tile_max_a = fmaxf(tile_max_a, v);
      }
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      tile_max_a = fmaxf(tile_max_a, __shfl_xor_sync(0xffffffff, tile_max_a, off));
      tile_max_b = fmaxf(tile_max_b, __shfl_xor_sync(0xffffffff, tile_max_b, off));
    }
    float new_a = fmaxf(m_a, tile_max_a), new_b = fmaxf(m_b, tile_max_b);
    float base_a = new_a == -INFINITY ? 0.f : new_a, base_b = new_b == -INFINITY ? 0.f : new_b;
    float alpha_a = exp2f(m_a - base_a), alpha_b = exp2f(m_b - base_b);
    m_a = new_a;
    m_b = new_b;
    float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      s[n][0] = exp2f(s[n][0] - base_a);
      s[n][1] = exp2f(s[n][1] - base_a);
      s[n][2] = exp2f(s[n][2] - base_b);
      s[n][3] = exp2f(s[n][3] - base_b);
      sum_a += s[n][0] + s[n][1];
      sum_b += s[n][2] + s[n][3];
    }
    l_a = l_a * alpha_a + sum_a;
    l_b = l_b * alpha_b + sum_b;
#pragma unroll
    for (int i = 0; i < kColTiles; ++i) {
      acc[i][0] *= alpha_a;
      acc[i][1] *= alpha_a;
      acc[i][2] *= alpha_b;
      acc[i][3] *= alpha_b;
    }

    // -- draft positions take their V from v_extend
    if (j0 + kBlockN > prefix && j_end > prefix) {
      __syncthreads();  // every warp is done reading K
      for (int r = tid / 4; r < kBlockN; r += kThreads / 4) {
        int64_t j = j0 + r;
        if (j < prefix || j >= j_end) continue;
        const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(p.v_extend) +
                                   (qo_start + j - prefix) * p.ve_stride_t;
        copy_row(kv_s + r * kLd, src, kValueDim, tid % 4, 4);
      }
      __syncthreads();
    }

    // -- O += P.V: P as bf16 hi + lo (two MMAs), V from the staged rows
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      uint32_t hi[4], lo[4];
      const float* p0 = s[2 * ks];
      const float* p1 = s[2 * ks + 1];
      float src[8] = {p0[0], p0[1], p0[2], p0[3], p1[0], p1[1], p1[2], p1[3]};
      float rem[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        rem[e] = src[e] - __bfloat162float(__float2bfloat16_rn(src[e]));
      hi[0] = pack_bf16(src[0], src[1]);
      hi[1] = pack_bf16(src[2], src[3]);
      hi[2] = pack_bf16(src[4], src[5]);
      hi[3] = pack_bf16(src[6], src[7]);
      lo[0] = pack_bf16(rem[0], rem[1]);
      lo[1] = pack_bf16(rem[2], rem[3]);
      lo[2] = pack_bf16(rem[4], rem[5]);
      lo[3] = pack_bf16(rem[6], rem[7]);
      const int key_row = ks * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
      const int col_off = 8 * (lane / 16);
#pragma unroll
      for (int i = 0; i < kColTiles; i += 2) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, kv_s + key_row * kLd + ch * kColsPerWarp + i * 8 + col_off);
        mma_bf16(acc[i], hi, vb[0], vb[1]);
        mma_bf16(acc[i], lo, vb[0], vb[1]);
        mma_bf16(acc[i + 1], hi, vb[2], vb[3]);
        mma_bf16(acc[i + 1], lo, vb[2], vb[3]);
      }
    }
  }

  // -- row sums across the quad
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffff, l_a, off);
    l_b += __shfl_xor_sync(0xffffffff, l_b, off);
  }

  // -- write: final output (one split) or the split's partial state
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    bool ok = half ? valid_b : valid_a;
    if (!ok) continue;
    int64_t row = half ? row_b : row_a;
    int64_t tok = qo_start + row / H, h = row % H;
    float m = half ? m_b : m_a, l = half ? l_b : l_a;
    const int d0 = ch * kColsPerWarp + 2 * t;  // this thread's columns: d0 + 8 i, + 1
    write_row_result(
        p, split, tok, h, m, l, ch == 0 && t == 0,
        [&](__nv_bfloat16* dst, float inv) {
          __nv_bfloat16* out = dst + d0;
#pragma unroll
          for (int i = 0; i < kColTiles; ++i)
            *reinterpret_cast<__nv_bfloat162*>(out + i * 8) =
                __floats2bfloat162_rn(acc[i][half * 2] * inv, acc[i][half * 2 + 1] * inv);
        },
        [&](float* dst) {
          float* ws = dst + d0;
#pragma unroll
          for (int i = 0; i < kColTiles; ++i)
            *reinterpret_cast<float2*>(ws + i * 8) = make_float2(acc[i][half * 2], acc[i][half * 2 + 1]);
        });
  }
}

}  // namespace kdtree
