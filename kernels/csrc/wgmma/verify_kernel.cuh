// Tree-verify attention for absorbed MLA, wgmma path for 16 or 32 query rows per CTA
// (sm_90a; 64-row CTAs take verify_kernel_rows.cuh): Hopper warpgroup MMAs with both
// operands in shared memory, computed transposed so that the few query rows of a verify
// step (draft tokens x heads) are the MMA's N dimension and KV positions its M:
//
//   S^T [64 positions x NW rows]  = K [64 x 576] . Q^T            (K-major A, K-major B)
//   O^T [512 dims x NW rows]     += V^T [512 x 64] . P^T [64 x NW] (MN-major A, K-major B)
//
// so 16 or 32 rows cost no padding, and V^T is read from the same swizzled KV tile as K.
// Two warpgroups per CTA, MWG of them computing 16 rows each (16 rows as 1 x 16 with the
// other warpgroup only copying, 32 as 2 x 16); warpgroup 1 queues its QK
// MMAs behind warpgroup 0's, so 0's softmax overlaps 1's MMAs. KV tiles of 64
// positions gathered by every thread with cp.async into two stages: the next tile's
// copies are issued while this tile's QK MMAs run (by a computing warpgroup 1 before it
// issues its own, by the others right after warpgroup 0's), its slot indices were loaded
// a tile before that. Softmax in fp32 per row over
// the tile's positions (maxima merged across the warpgroup's four warps through shared
// memory; the running maximum moves as running_max.cuh says), P rounded to bf16 once, the row
// sums kept in fp32, the output rounded once.
// Split-KV partial states have the same format as the other paths (combine.cuh).
#pragma once
#include <cuda_bf16.h>
#include <cstdint>
#include <utility>

#include "../common/grid_dependency.cuh"
#include "../common/mma.cuh"
#include "../common/request_extent.cuh"
#include "../common/row_result.cuh"
#include "../common/wgmma.cuh"
#include "../split_plan.h"
#include "../verify_params.h"
#include "kv_staging.cuh"
#include "running_max.cuh"

namespace kdtree {
namespace wgmma_path {

template <int NW, int WGS, int MWG>
struct Shape {
  static constexpr int kThreads = 128 * WGS;
  static constexpr int kRows = NW * MWG;                  // query rows per CTA
  static constexpr int kQBlockBytes = kRows * 128;
  static constexpr int kQBytes = kColBlocks * kQBlockBytes;
  static constexpr int kPBytes = NW * 128;                // one warpgroup's P^T
  static constexpr int kRedFloats = MWG * 4 * NW;
  static constexpr int kDraftWords = 2 * kMaxDraft;       // draft visibility: 2 words per draft token
  static constexpr int kSmemBytes = 1024 /* alignment slack */ + kStages * kStageBytes + kQBytes +
                                    MWG * kPBytes + kRedFloats * 4 + kDraftWords * 4;
  static constexpr int kThreadsPerRow = kThreads / kTile;   // KV tile copies
  static constexpr int kJ = NW / 8;                       // n8 groups of the accumulators
  static_assert(NW == 16, "rows per warpgroup (64-row CTAs take the rows kernel)");
  static_assert(MWG >= 1 && MWG <= WGS, "math warpgroups: some or all of the CTA's");
  static_assert(kSmemBytes <= 232448, "Hopper's opt-in shared memory per block");
};

// Visibility of this thread's score elements in a tile that is not all prefix: bit k for
// element k (position `pos` + 8 * (k / 2 % 2), row `row_here` + 8 * (k / 4) + k % 2), draft
// columns read from the staged bits (stage_draft_visibility). A rolled loop: only boundary
// tiles come here, and it keeps the accumulators in registers.
template <int NW>
__device__ __forceinline__ uint32_t visible_bits(const uint32_t* draft_vis, int64_t prefix, int64_t pos,
                                                 int64_t j_end, int64_t row_here, int64_t H, uint32_t valid_bits) {
  uint32_t bits = 0;
#pragma unroll 1
  for (int k = 0; k < NW / 2; ++k) {
    if (!((valid_bits >> k) & 1u)) continue;
    const int64_t j = pos + 8 * ((k >> 1) & 1);
    if (j >= j_end) continue;
    const int64_t d = j - prefix;
    int64_t tok = 0, head;
    if (d >= 0) row_token_head(row_here + 8 * (k / 4) + (k & 1), H, &tok, &head);
    if (d < 0 || ((draft_vis[tok * 2 + (d >> 5)] >> (d & 31)) & 1u)) bits |= 1u << k;
  }
  return bits;
}

// S^T = K . Q^T: step i = (column block i / 4, k16 step i % 4), offsets in 16-byte units.
template <int NW, int QBlockBytes, int... I>
__device__ __forceinline__ void qk_steps(float* s, uint32_t k_desc, uint32_t q_desc,
                                         std::integer_sequence<int, I...>) {
  (wgmma::Mma<NW, 0>::template run<((I / 4) * kBlockBytes + (I % 4) * 32) / 16,
                                   ((I / 4) * QBlockBytes + (I % 4) * 32) / 16>(s, k_desc, q_desc, I != 0), ...);
}

// O^T += V^T . P^T: step i = (value block i / 4, k16 step i % 4 = 16 positions = 2048 bytes).
template <int NW, int... I>
__device__ __forceinline__ void pv_steps(float (*acc)[NW / 2], uint32_t v_desc, uint32_t p_desc,
                                         std::integer_sequence<int, I...>) {
  (wgmma::Mma<NW, 1>::template run<((I / 4) * kBlockBytes + (I % 4) * 2048) / 16, ((I % 4) * 32) / 16>(
       acc[I / 4], v_desc, p_desc, 1), ...);
}

template <int NW, int WGS, int MWG, bool kBatchLayout>  // kBatchLayout: cta_place()
__global__ void __launch_bounds__(128 * WGS, 1)
verify_wgmma_kernel(const VerifyParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  prefetch_extent_lines(p, blockIdx.y);  // L2 prefetches only, ahead of the wait
  wait_for_prior_grids();  // before any global access (inputs, workspace)
  using S = Shape<NW, WGS, MWG>;
  constexpr int TPR = S::kThreadsPerRow;
  constexpr int J = S::kJ;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_address(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;   // swizzled blocks start on 1024 bytes
  const uint32_t q_addr = base + kStages * kStageBytes;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const bool math_wg = wg < MWG;  // the other warpgroups only copy (warpgroup-uniform)
  const int g = lane / 4, t = lane % 4;
  const uint32_t p_addr = q_addr + S::kQBytes + wg * S::kPBytes;   // this warpgroup's P^T
  // the warpgroup index as a warp-uniform value (so MMA descriptors stay in uniform registers)
  const int wg_uniform = __shfl_sync(0xffffffffu, wg, 0);
  const uint32_t p_addr_uniform = q_addr + S::kQBytes + wg_uniform * S::kPBytes;
  float* red = reinterpret_cast<float*>(smem_raw + (q_addr + S::kQBytes + MWG * S::kPBytes - raw));
  float* red_wg = red + wg * 4 * NW;
  uint32_t* draft_vis = reinterpret_cast<uint32_t*>(red + S::kRedFloats);

  const int64_t H = p.heads;
  CtaWork work;
  if (!cta_work<kBatchLayout>(p, S::kRows, kMinChunkWgmma, kTile, &work)) return;
  const auto& [ext, rows, row0, length, split, j_begin, j_end, mask_base, half_idle] = work;
  const int64_t prefix = ext.prefix, qo_start = ext.qo_start;

  // this thread's accumulator columns are rows row_here + 8*jj + e of the request (bit
  // 4*jj + e and 4*jj + 2 + e of the masks below)
  const int64_t row_here = row0 + wg * NW + 2 * t;
  uint32_t valid_bits = 0;
#pragma unroll
  for (int k = 0; k < NW / 2; ++k)
    if (row_here + 8 * (k / 4) + (k & 1) < rows) valid_bits |= 1u << k;

  float acc[kValueBlocks][NW / 2];
#pragma unroll
  for (int mt = 0; mt < kValueBlocks; ++mt)
#pragma unroll
    for (int i = 0; i < NW / 2; ++i) acc[mt][i] = 0.f;
  float m_run[J][2], l_run[J][2];
#pragma unroll
  for (int jj = 0; jj < J; ++jj) m_run[jj][0] = m_run[jj][1] = -INFINITY, l_run[jj][0] = l_run[jj][1] = 0.f;

  const int load_r = tid / TPR, load_c0 = tid % TPR;
  const int64_t num_tiles = j_begin < j_end ? ceil_div(j_end - j_begin, kTile) : 0;
  if (num_tiles > 0) {
    // the first tile's slot index is loaded before the Q copies are issued (its latency
    // hides behind them)
    const int64_t first_index = prefix_index_ahead(p, ext, j_begin + load_r, j_end);
    load_q_rows<S::kThreads, S::kRows>(p, q_addr, row0, rows, qo_start, tid);  // Q^T
    load_kv_tile<TPR>(p, ext, base, j_begin,
                      kv_source_of(p, ext, j_begin + load_r, j_end, first_index, load_c0 == 0), load_r, load_c0);
  }
  cp_async_commit();
  if (num_tiles > 0 && j_end > prefix)  // this split holds draft positions (the first tile's loads are in flight)
    stage_draft_visibility<S::kThreads>(p, mask_base, length, prefix, ext.qo_len, draft_vis);
  // the kv_indices entry of this thread's row of the next tile to be loaded
  int64_t next_index = prefix_index_ahead(p, ext, j_begin + kTile + load_r, j_end);

  const float scale = static_cast<float>(p.scale_log2);
  const uint32_t q_desc = wgmma::descriptor_low(q_addr + wg_uniform * NW * 128, 16);
  const uint32_t p_desc = wgmma::descriptor_low(p_addr_uniform, 16);
  for (int64_t it = 0; it < num_tiles; ++it) {
    const uint32_t stage = base + static_cast<uint32_t>(it & 1) * kStageBytes;
    const int64_t j0 = j_begin + it * kTile;
    const bool load_next = it + 1 < num_tiles;
    const uint32_t next_stage = base + static_cast<uint32_t>((it + 1) & 1) * kStageBytes;
    const int64_t next_source = await_tile(p, ext, j0, j_end, load_next, load_r, load_c0, &next_index);

    // -- S^T = K . Q^T over 576 dims (36 k16 steps)
    float s[NW / 2];
#pragma unroll
    for (int i = 0; i < NW / 2; ++i) s[i] = 0.f;
    const uint32_t stage_uniform = __shfl_sync(0xffffffffu, stage, 0);
    // the next tile's copies go into the other stage, which the barrier above freed: issued
    // while the tensor cores work on this one (warpgroup 0 and a copy-only warpgroup right
    // after warpgroup 0's QK issue; with two computing warpgroups, warpgroup 1 before its
    // own, while it waits for warpgroup 0's)
    const bool copy_first = MWG == 2 && wg == 1;
    if (copy_first && load_next) load_kv_tile<TPR>(p, ext, next_stage, j0 + kTile, next_source, load_r, load_c0);
    if (math_wg) {
      // warpgroup 1 queues its QK MMAs behind warpgroup 0's, so warpgroup 0's softmax runs
      // while the tensor cores work for warpgroup 1
      if (MWG == 2 && wg == 1) wgmma::named_barrier(3, 256);
      const uint32_t k_desc = wgmma::descriptor_low(stage_uniform, 16);
      wgmma::fence();
      qk_steps<NW, S::kQBlockBytes>(s, k_desc, q_desc, std::make_integer_sequence<int, kColBlocks * 4>{});
      wgmma::commit();
      if (MWG == 2 && wg == 0) wgmma::named_arrive(3, 256);
    }
    if (!copy_first && load_next) load_kv_tile<TPR>(p, ext, next_stage, j0 + kTile, next_source, load_r, load_c0);
    cp_async_commit();
    wgmma::wait<0>();
#pragma unroll
    for (int i = 0; i < NW / 2; ++i) wgmma::pin(s[i]);

    // -- draft positions take their V from v_extend: copied over K's first 512 columns once
    // every warpgroup is done with K, asynchronously (it lands while the softmax runs)
    const bool draft_tile = j0 + kTile > prefix && j_end > prefix;
    if (draft_tile) {
      __syncthreads();
      load_draft_values<TPR>(p, ext, stage, j0, j_end, load_r, load_c0);
    }

    if (math_wg) {
      // -- scale and mask (log2 units); s[4*jj + e]: position 16*warp + g + 8*(e/2), row 8*jj + 2*t + e%2
      const uint32_t vis = j0 + kTile <= prefix && j0 + kTile <= j_end
          ? valid_bits
          : visible_bits<NW>(draft_vis, prefix, j0 + 16 * warp + g, j_end, row_here, H, valid_bits);
      float tmax[J][2];
#pragma unroll
      for (int jj = 0; jj < J; ++jj) {
        tmax[jj][0] = tmax[jj][1] = -INFINITY;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float v = (vis >> (4 * jj + e)) & 1u ? s[4 * jj + e] * scale : -INFINITY;
          s[4 * jj + e] = v;
          tmax[jj][e & 1] = fmaxf(tmax[jj][e & 1], v);
        }
#pragma unroll
        for (int c = 0; c < 2; ++c) {
#pragma unroll
          for (int off = 4; off < 32; off <<= 1)
            tmax[jj][c] = fmaxf(tmax[jj][c], __shfl_xor_sync(0xffffffff, tmax[jj][c], off));
          if (g == 0) red_wg[warp * NW + 8 * jj + 2 * t + c] = tmax[jj][c];
        }
      }
      wgmma::named_barrier(1 + wg, 128);

      // -- online softmax; P^T (bf16) to shared memory, rows n, positions contiguous
      float alpha_r[J][2];
      bool rescale = false;
#pragma unroll
      for (int jj = 0; jj < J; ++jj)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int n = 8 * jj + 2 * t + c;
          float mx = red_wg[n];
#pragma unroll
          for (int w = 1; w < 4; ++w) mx = fmaxf(mx, red_wg[w * NW + n]);
          const float new_m = raised_max(m_run[jj][c], mx);
          const float base_m = new_m == -INFINITY ? 0.f : new_m;
          const float alpha = exp2_approx(m_run[jj][c] - base_m);
          alpha_r[jj][c] = alpha;
          rescale |= alpha != 1.f;
          m_run[jj][c] = new_m;
          const float p0 = exp2_approx(s[4 * jj + c] - base_m), p1 = exp2_approx(s[4 * jj + 2 + c] - base_m);
          l_run[jj][c] = l_run[jj][c] * alpha + (p0 + p1);
          const int pos = 16 * warp + g;
          bf16* pt = reinterpret_cast<bf16*>(smem_raw + (p_addr - raw));
          pt[wgmma::swizzled(n, pos / 8) / 2 + pos % 8] = __float2bfloat16_rn(p0);
          pt[wgmma::swizzled(n, pos / 8 + 1) / 2 + pos % 8] = __float2bfloat16_rn(p1);
        }
      if (rescales(__any_sync(0xffffffffu, rescale)))  // skipped when no row of this warp moved its maximum
#pragma unroll
        for (int jj = 0; jj < J; ++jj)
#pragma unroll
          for (int c = 0; c < 2; ++c)
#pragma unroll
            for (int mt = 0; mt < kValueBlocks; ++mt) {
              acc[mt][4 * jj + c] *= alpha_r[jj][c];
              acc[mt][4 * jj + 2 + c] *= alpha_r[jj][c];
            }
    }

    if (draft_tile) {  // the draft V rows landed for every thread (and the next tile's, if any)
      cp_async_wait<0>();
      wgmma::fence_shared_for_async();
      __syncthreads();
    }
    if (math_wg) {
      wgmma::fence_shared_for_async();
      wgmma::named_barrier(1 + wg, 128);  // P^T complete; the maxima were read

      // -- O^T += V^T . P^T: 8 value blocks x 4 k16 steps
      const uint32_t v_desc = wgmma::descriptor_low(stage_uniform, kBlockBytes);
      wgmma::fence();
      pv_steps<NW>(acc, v_desc, p_desc, std::make_integer_sequence<int, kValueBlocks * 4>{});
      wgmma::commit();
      wgmma::wait<0>();
#pragma unroll
      for (int mt = 0; mt < kValueBlocks; ++mt)
#pragma unroll
        for (int i = 0; i < NW / 2; ++i) wgmma::pin(acc[mt][i]);
    }
  }
  cp_async_wait<0>();
  allow_dependents_at_epilogue(half_idle);
  if (!math_wg) return;

  // -- row sums: over the lanes that share a row, then over the warpgroup's four warps
#pragma unroll
  for (int jj = 0; jj < J; ++jj)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
#pragma unroll
      for (int off = 4; off < 32; off <<= 1)
        l_run[jj][c] += __shfl_xor_sync(0xffffffff, l_run[jj][c], off);
    }
  wgmma::named_barrier(1 + wg, 128);  // the last tile's maxima were read
  if (g == 0)
#pragma unroll
    for (int jj = 0; jj < J; ++jj)
#pragma unroll
      for (int c = 0; c < 2; ++c) red_wg[warp * NW + 8 * jj + 2 * t + c] = l_run[jj][c];
  wgmma::named_barrier(1 + wg, 128);

  // -- write: final output (one split) or the split's partial state
#pragma unroll
  for (int jj = 0; jj < J; ++jj)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      if (!((valid_bits >> (4 * jj + c)) & 1u)) continue;
      const int n = 8 * jj + 2 * t + c;
      const float l = red_wg[n] + red_wg[NW + n] + red_wg[2 * NW + n] + red_wg[3 * NW + n];
      const float m = m_run[jj][c];
      const int64_t row = row0 + wg * NW + n;
      int64_t tk, h;
      row_token_head(row, H, &tk, &h);
      tk += qo_start;
      const int d0 = 16 * warp + g;  // this thread's columns: d0 + 64 mt, + 8
      write_row_result(
          p, split, tk, h, m, l, warp == 0 && g == 0,
          [&](bf16* dst, float inv) {
            bf16* out = dst + d0;
#pragma unroll
            for (int mt = 0; mt < kValueBlocks; ++mt) {
              out[mt * 64] = __float2bfloat16_rn(acc[mt][4 * jj + c] * inv);
              out[mt * 64 + 8] = __float2bfloat16_rn(acc[mt][4 * jj + 2 + c] * inv);
            }
          },
          [&](float* dst) {
            float* ws = dst + d0;
#pragma unroll
            for (int mt = 0; mt < kValueBlocks; ++mt) {
              ws[mt * 64] = acc[mt][4 * jj + c];
              ws[mt * 64 + 8] = acc[mt][4 * jj + 2 + c];
            }
          });
    }
#else
  __trap();  // built for another architecture: the plan never picks this path there
#endif
}

}  // namespace wgmma_path
}  // namespace kdtree
