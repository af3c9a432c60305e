// Tree-verify attention for absorbed MLA, rows path (sm_90a): Hopper warpgroup MMAs with the
// CTA's 64 query rows (draft tokens x heads, zero-padded) as the MMA's M:
//
//   S_w [64 rows x 32 positions] = Q [64 x 576] . K_w^T     (warpgroup w: positions 32w..32w+31)
//   O [64 rows x 256 dims]     += P [64 x 64] . V[:, half]   (P from shared memory, V N-major)
//
// Two warpgroups, each computing the scores of its half of a 64-position KV tile (no score is
// computed twice) and owning half of the 512 value dims. Each warpgroup forms its half of P
// against the common running maximum (moved as running_max.cuh says) and stores it (bf16) in
// P's own block after Q, and both run the PV MMA over the whole P. The halves' row maxima meet
// in shared memory only on a tile that moves a maximum (a split's first, draft tiles, a jump):
// on the others P is formed against the maximum both warpgroups already hold, and one barrier
// publishes P and says whether it was formed right (-DKDTREE_ROW_MAX_EVERY_TILE: the maxima
// meet on every tile, P over the tile's rope block, which no MMA reads once both QKs are
// done). KV tiles of 64 positions are gathered with cp.async into two stages, in one of two
// builds (split_plan.h: rows_copier()):
// - by every thread, the next tile's copies issued while this tile's QK MMAs run (warpgroup
//   1's before it issues its own MMAs, while it waits for warpgroup 0's; 0's right after its
//   issue), each tile opened by a CTA barrier;
// - by a third warpgroup that only copies (kCopier; fill_tile(), as the seesaw kernel's
//   copier): tile t + 2 as soon as both computing warpgroups have released tile t's stage
//   after its PV (empty barrier), a fill complete once its copies have landed and every
//   computing thread has arrived (full barrier), so the computing warpgroups issue no KV copy
//   and wait at no barrier of the whole CTA; the copier gives its registers to them
//   (setmaxnreg) and their barriers are named ones of 256 threads.
// Draft positions take V from v_extend, copied by the computing warpgroups over K's first 512
// columns after QK. Split-KV partial states have the same format as the other paths
// (combine.cuh).
#pragma once
#include <cuda_bf16.h>
#include <cstdint>
#include <utility>

#include "../common/grid_dependency.cuh"
#include "../common/mbarrier.cuh"
#include "../common/mma.cuh"
#include "../common/request_extent.cuh"
#include "../common/wgmma.cuh"
#include "../split_plan.h"
#include "../verify_params.h"
#include "kv_staging.cuh"
#include "row_halves.cuh"
#include "running_max.cuh"
#include "short_layout.cuh"

namespace kdtree {
namespace wgmma_rows {

using namespace wgmma_path;  // the KV tile layout and its staging (kv_staging.cuh)

constexpr int kRows = 64;                               // query rows per CTA (the MMA's M)
constexpr int kConsumers = 256;                         // two warpgroups computing
// threads per CTA: the computing warpgroups, and with kCopier a warpgroup copying KV tiles
template <bool kCopier>
constexpr int kThreadsOf = kCopier ? kConsumers + 128 : kConsumers;
constexpr int kConsumerRegisters = 232;  // kCopier: per computing thread, after the copier gives back
constexpr int kCopierRegisters = 40;     // all but these (setmaxnreg; 240 and 24 spill more)
static_assert(2 * 128 * kConsumerRegisters + 128 * kCopierRegisters <= 65536 / 384 / 8 * 8 * 384,
              "the warpgroups' registers fit the CTA's launch allocation");
constexpr int kConsumerBarrier = 6;      // kCopier: the computing warpgroups' CTA-wide barrier
constexpr int kHalfDims = kValueDim / 2;                // value dims per warpgroup
constexpr int kQBlockBytes = kRows * 128;
constexpr int kQBytes = kColBlocks * kQBlockBytes;
constexpr int kDraftWords = 2 * kMaxDraft;
#if defined(KDTREE_ROW_MAX_EVERY_TILE)
constexpr int kRopeBlock = kColBlocks - 1;  // where P goes once both QKs of the tile are done
constexpr int kPBytes = 0;
#else
constexpr int kPBytes = kRows * kTile * 2;  // P's own block (bf16, swizzled like Q), after Q
#endif
constexpr int kSmemBytes = 1024 /* alignment slack */ + kStages * kStageBytes + kQBytes + kPBytes + kDraftWords * 4 +
                           4 * kRows * 4 /* row maxima and sums of each warpgroup */ +
                           4 * 8 /* kCopier: full and empty barriers per stage */;
constexpr int kThreadsPerRow = kConsumers / kTile;      // KV tile copies (kCopier: draft V rows only)
static_assert(kSmemBytes <= 232448, "Hopper's opt-in shared memory per block");
static_assert(kRows * kStagedRowBytes <= kQBytes, "the staged partial rows fit where Q was");

// S_w = Q . K_w^T: step i = (column block i / 4, k16 step i % 4), offsets in 16-byte units;
// k_desc addresses the warpgroup's 32 positions (rows 32 w.. of each block).
template <int... I>
__device__ __forceinline__ void qk_steps(float* s, uint32_t q_desc, uint32_t k_desc,
                                         std::integer_sequence<int, I...>) {
  (wgmma::MmaSS32::run<((I / 4) * kQBlockBytes + (I % 4) * 32) / 16, ((I / 4) * kBlockBytes + (I % 4) * 32) / 16>(
       s, q_desc, k_desc, I != 0), ...);
}

// O += P . V, P K-major in shared memory: k16 step i = positions [16 i, 16 i + 16) (+32 bytes
// of P, two 8-row groups = 2048 bytes of the N-major V).
template <int... I>
__device__ __forceinline__ void pv_steps(float* acc, uint32_t p_desc, uint32_t v_desc,
                                         std::integer_sequence<int, I...>) {
  (wgmma::MmaSS256::run<(I * 32) / 16, (I * 2048) / 16>(acc, p_desc, v_desc), ...);
}

// This warpgroup's half of P (bf16) at p_block, swizzled like Q: s[i], s[i + 1] go to row
// qrow[r % 2], positions 32 w + 8 (i / 4) + 2 t and + 1 (16-byte chunk 4 w + i / 4, bytes
// 4 t..4 t + 3), P = 2^(s - base_m[row half]); adds each row's P to sum[row half].
__device__ __forceinline__ void store_p_half(const float* s, const float* base_m, uint32_t p_block, const int* qrow,
                                             int wg, int t, float* sum) {
#pragma unroll
  for (int kk = 0; kk < 2; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = 8 * kk + 2 * r;  // s[i], s[i + 1]: row lo/hi = r % 2
      const float p0 = exp2_approx(s[i] - base_m[r & 1]);
      const float p1 = exp2_approx(s[i + 1] - base_m[r & 1]);
      sum[r & 1] += p0 + p1;
      const uint32_t at = p_block + wgmma::swizzled(qrow[r & 1], 4 * wg + 2 * kk + (r >> 1)) + 4 * t;
      asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(at), "r"(pack_bf16(p0, p1)) : "memory");
    }
}

// A barrier of the computing warpgroups: the whole CTA's, or with kCopier a named one of theirs
// (the copier does not take part); cta_barrier_or() also returns whether `pred` held in any.
template <bool kCopier>
__device__ __forceinline__ void cta_barrier() {
  if constexpr (kCopier) wgmma::named_barrier(kConsumerBarrier, kConsumers);
  else __syncthreads();
}
template <bool kCopier>
__device__ __forceinline__ bool cta_barrier_or(bool pred) {
  if constexpr (kCopier) return wgmma::named_barrier_or(kConsumerBarrier, kConsumers, pred);
  else return __syncthreads_or(pred) != 0;
}

// 64 rows per CTA, or in a one-request call short enough for the short layout
// (short_layout.cuh) 16 of them (the rest padding). kPartials: the partial states this build
// writes (split_plan.h: PartialBuild, partial_build(), which the launch follows); kCopier:
// the build with a copying warpgroup (rows_copier()).
template <bool kBatchLayout, int kPartials, bool kCopier>  // kBatchLayout: cta_place()
__global__ void __launch_bounds__(kThreadsOf<kCopier>, 1)
verify_rows_kernel(const VerifyParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  prefetch_extent_lines(p, blockIdx.y);  // L2 prefetches only, ahead of the wait
  wait_for_prior_grids();  // before any global access (inputs, workspace)
  CtaCoord coord = grid_coord(p);
  RequestExtent request;
  // no piece for it in the batch layout, or its tokens lie outside q: nothing to write
  if (!cta_place<kBatchLayout>(p, kTile, kMinChunkWgmma, &coord, &request)) return;
  int64_t block_rows = kRows;
  // one request only (bs 1: no batch layout); the build for calls that may take it writes fp32
  // partials there and tells the combine which format it wrote
  const bool short_layout = enter_short_layout(p, request, &coord, &block_rows);
  if constexpr (kPartials == kPartialsFp16ShortFp32) record_call_format(p, short_layout);
  constexpr int TPR = kThreadsPerRow;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_address(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;   // swizzled blocks start on 1024 bytes
  const uint32_t q_addr = base + kStages * kStageBytes;
#if !defined(KDTREE_ROW_MAX_EVERY_TILE)
  const uint32_t p_block = q_addr + kQBytes;  // 1024-byte aligned
#endif
  uint32_t* draft_vis = reinterpret_cast<uint32_t*>(smem_raw + (q_addr + kQBytes + kPBytes - raw));
  float* row_max = reinterpret_cast<float*>(draft_vis + kDraftWords);  // [2][64]: this tile's, per warpgroup
  float* row_sum = row_max + 2 * kRows;                                // [2][64]: l of each warpgroup
  const uint32_t full = smem_address(row_sum + 2 * kRows);  // kCopier, stage s: full + 8 s (landed), empty + 8 s (free)
  const uint32_t empty = full + 16;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int wg_uniform = __shfl_sync(0xffffffffu, wg, 0);

  const int64_t H = p.heads;
  CtaWork work;
  if (!cta_work(p, coord, request, block_rows, kMinChunkWgmma, kTile, &work)) return;
  const auto& [ext, rows, row0, length, split, j_begin, j_end, mask_base, half_idle] = work;
  const int64_t prefix = ext.prefix, qo_start = ext.qo_start;
  const int64_t row_end = rows < row0 + block_rows ? rows : row0 + block_rows;  // past it: padding

  // this thread's rows of the block, qrow[0] = 16 warp + g (s[4k], s[4k + 1]) and qrow[0] + 8
  // (s[4k + 2], s[4k + 3]); their draft tokens (-1: padding)
  int tok_of[2];
  const uint32_t valid_bits = row_tokens<16>(row0 + 16 * warp + g, row_end, H, tok_of);
  const int qrow[2] = {16 * warp + g, 16 * warp + g + 8};  // this thread's rows in the block

  float acc[kHalfDims / 2];  // acc[4k + e]: row lo/hi (e / 2), dim 256 wg + 8k + 2t + e % 2
#pragma unroll
  for (int i = 0; i < kHalfDims / 2; ++i) acc[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

  const int load_r = tid / TPR, load_c0 = tid % TPR;
  const int64_t num_tiles = j_begin < j_end ? ceil_div(j_end - j_begin, kTile) : 0;
  int64_t next_index = 0;
  if constexpr (kCopier) {
    // warpgroup 2 copies tile tt into stage tt % 2 once its previous fill is released, then returns
    if (run_copier_warpgroup<kThreadsOf<true>, kCopierRegisters, kConsumerRegisters>(
            p, ext, base, j_begin, j_end, num_tiles, full, empty, tid, wg, warp, lane))
      return;
    if (num_tiles > 0) {
      load_q_rows<kConsumers, kRows>(p, q_addr, row0, row_end, qo_start, tid);
      for (int st = 0; st < kStages && st < num_tiles; ++st) mbarrier::arrive_after_copies(full + 8 * st);  // (Q)
      if (j_end > prefix) stage_draft_visibility<kConsumers>(p, mask_base, length, prefix, ext.qo_len, draft_vis);
    }
    wgmma::named_barrier(kConsumerBarrier, kConsumers);  // the draft visibility bits
  } else {
    if (num_tiles > 0) {
      const int64_t first_index = prefix_index_ahead(p, ext, j_begin + load_r, j_end);
      load_q_rows<kConsumers, kRows>(p, q_addr, row0, row_end, qo_start, tid);
      load_kv_tile<TPR>(p, ext, base, j_begin,
                        kv_source_of(p, ext, j_begin + load_r, j_end, first_index, load_c0 == 0), load_r, load_c0);
    }
    cp_async_commit();
    if (num_tiles > 0 && j_end > prefix)
      stage_draft_visibility<kConsumers>(p, mask_base, length, prefix, ext.qo_len, draft_vis);
    next_index = prefix_index_ahead(p, ext, j_begin + kTile + load_r, j_end);
  }

  const float scale = static_cast<float>(p.scale_log2);
  const uint32_t q_desc = wgmma::descriptor_low(q_addr, 16);
  const uint32_t half_offset = static_cast<uint32_t>(wg_uniform) * (kTile / 2) * 128;  // rows 32 w..
  for (int64_t it = 0; it < num_tiles; ++it) {
    const uint32_t st = static_cast<uint32_t>(it & 1);
    const uint32_t stage = base + st * kStageBytes;
    const int64_t j0 = j_begin + it * kTile;
    const bool load_next = !kCopier && it + 1 < num_tiles;
    const uint32_t next_stage = base + static_cast<uint32_t>((it + 1) & 1) * kStageBytes;
    int64_t next_source = -1;
    if constexpr (kCopier) {
      mbarrier::wait(full + 8 * st, static_cast<uint32_t>((it >> 1) & 1));  // tile it (and Q) landed
      wgmma::fence_shared_for_async();
    } else {
      next_source = await_tile(p, ext, j0, j_end, load_next, load_r, load_c0, &next_index);
    }

    // -- S_w = Q . K_w^T over 576 dims (36 k16 steps); warpgroup 1's behind warpgroup 0's
    float s[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) s[i] = 0.f;
    const uint32_t stage_uniform = __shfl_sync(0xffffffffu, stage, 0);
    // the next tile's copies: warpgroup 1 issues its share while it waits for warpgroup 0's
    // QK issue, warpgroup 0 its share right after that issue (while the tensor cores work).
    // Warpgroup 1's QK queues behind warpgroup 0's; with kCopier the barrier also keeps either
    // warpgroup from storing this tile's P before the other's PV of the last tile has read it
    if (wg == 1) {
      if (load_next) load_kv_tile<TPR>(p, ext, next_stage, j0 + kTile, next_source, load_r, load_c0);
      wgmma::named_barrier(3, 256);
    }
    wgmma::fence();
    qk_steps(s, q_desc, wgmma::descriptor_low(stage_uniform + half_offset, 16),
             std::make_integer_sequence<int, kColBlocks * 4>{});
    wgmma::commit();
    if (wg == 0) {
      wgmma::named_barrier(3, 256);  // a sync, not an arrive: racecheck mis-orders the epilogue's
                                     // row-sum exchange after one-sided arrivals
      if (load_next) load_kv_tile<TPR>(p, ext, next_stage, j0 + kTile, next_source, load_r, load_c0);
    }
    if constexpr (!kCopier) cp_async_commit();
    wgmma::wait<0>();
#pragma unroll
    for (int i = 0; i < 16; ++i) wgmma::pin(s[i]);

    // -- scale and mask (log2 units); this half's row maxima over the quad, then both halves'
    const uint32_t vis = j0 + kTile <= prefix && j0 + kTile <= j_end
        ? valid_bits
        : row_visible_bits<16>(draft_vis, prefix, j0 + kTile / 2 * wg + 2 * t, j_end, tok_of[0], tok_of[1]);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const float v = (vis >> i) & 1u ? s[i] * scale : -INFINITY;
      s[i] = v;
      mx[fragment_row_half(i)] = fmaxf(mx[fragment_row_half(i)], v);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    }
    const bool draft_tile = j0 + kTile > prefix && j_end > prefix;
    float sum[2] = {0.f, 0.f};
#if defined(KDTREE_ROW_MAX_EVERY_TILE)
    const uint32_t p_block = stage + kRopeBlock * kBlockBytes;
    {
#else
    // -- a prefix tile that moves no row's running maximum (raised_max: every tile after a
    // split's first on most data) needs no exchange of the halves' maxima: each warpgroup
    // forms its half of P against m_run, which both hold, and one barrier both publishes P
    // and tells whether any warp's maximum moved. Only then are the maxima exchanged and P
    // formed again, as before; a split's first tile (whose scores set the maximum) and draft
    // tiles (whose V copy waits for both QKs) exchange them at once. -DKDTREE_ROW_MAX_EVERY_TILE:
    // every tile exchanges them (A/B).
    bool exchange = draft_tile || it == 0;
    if (!exchange) {
      const bool moved = raised_max(m_run[0], mx[0]) != m_run[0] || raised_max(m_run[1], mx[1]) != m_run[1];
      const float base_m[2] = {m_run[0] == -INFINITY ? 0.f : m_run[0], m_run[1] == -INFINITY ? 0.f : m_run[1]};
      store_p_half(s, base_m, p_block, qrow, wg, t, sum);
      wgmma::fence_shared_for_async();
      exchange = cta_barrier_or<kCopier>(moved);  // all of P in shared memory; did a maximum move?
      if (!exchange)
#pragma unroll
        for (int h = 0; h < 2; ++h) l_run[h] += sum[h];  // alpha = 1: nothing to rescale
    }
    if (exchange) {
      sum[0] = sum[1] = 0.f;
#endif
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (t == 0) row_max[wg * kRows + qrow[h]] = mx[h];
      cta_barrier<kCopier>();  // both QKs done (K is free), both halves' maxima in shared memory

      // -- draft positions take their V from v_extend: copied over K's first 512 columns (it
      // lands while the softmax runs)
      if (draft_tile) load_draft_values<TPR>(p, ext, stage, j0, j_end, load_r, load_c0);

      float alpha[2], base_m[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // the same maximum in both warpgroups (fmaxf commutes)
        const float new_m = raised_max(m_run[h], fmaxf(row_max[qrow[h]], row_max[kRows + qrow[h]]));
        base_m[h] = new_m == -INFINITY ? 0.f : new_m;
        alpha[h] = exp2_approx(m_run[h] - base_m[h]);
        m_run[h] = new_m;
      }
      store_p_half(s, base_m, p_block, qrow, wg, t, sum);
#pragma unroll
      for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * alpha[h] + sum[h];
      // skipped when no row of this warp moved its maximum
      if (rescales(__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)))
#pragma unroll
        for (int i = 0; i < kHalfDims / 2; ++i) acc[i] *= alpha[fragment_row_half(i)];

      if (draft_tile) cp_async_wait<0>();  // the draft V rows landed (and the next tile's, if any)
      wgmma::fence_shared_for_async();
      cta_barrier<kCopier>();  // all of P (and the draft V rows) in shared memory
    }

    // -- O += P . V over this warpgroup's 256 dims (4 k16 steps of N = 256)
    wgmma::fence();
    pv_steps(acc, wgmma::descriptor_low(__shfl_sync(0xffffffffu, p_block, 0), 16),
             wgmma::descriptor_low(stage_uniform + wg_uniform * 4 * kBlockBytes, kBlockBytes),
             std::make_integer_sequence<int, kTile / 16>{});
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int i = 0; i < kHalfDims / 2; ++i) wgmma::pin(acc[i]);
    if constexpr (kCopier) release_stage(full + 8 * st, empty + 8 * st, it + kStages < num_tiles, lane);
  }
  cp_async_wait<0>();
  allow_dependents_at_epilogue(half_idle);

  // -- row sums over the quad and both warpgroups; the output rows or the split's partial state
  write_row_halves<kPartials != kPartialsFp32>(p, split, row0, row_end, qo_start, tok_of, qrow, m_run, l_run, acc,
                                               row_sum, smem_raw + (q_addr - raw),
                                               kPartials == kPartialsFp16 || !short_layout, wg, t,
                                               [] { cta_barrier<kCopier>(); });
#else
  __trap();  // built for another architecture: the plan never picks this path there
#endif
}

}  // namespace wgmma_rows
}  // namespace kdtree
