// Tree-verify attention for absorbed MLA, 64 query rows per CTA (sm_90a), "seesaw" schedule:
// the CTA's 64 rows (draft tokens x heads, zero-padded) are the MMA's M; KV tiles of 64
// positions come in pairs, tile a in stage 0 and tile b in stage 1. Warpgroup 0 owns value
// dims [0, 256) of O (O_L) and computes tile a's scores, warpgroup 1 owns [256, 512) (O_R)
// and computes tile b's:
//
//   WG0: S_a = Q K_a^T (N = 64) | m_a, P_a = 2^(S_a - m_a) | O_L = O_L 2^(m - m_a) + P_a V_aL
//        | (m_b from WG1) O_L *= 2^(m_a - m_b); O_L += P_b V_bL
//   WG1: S_b = Q K_b^T | (m_a from WG0) O_R *= 2^(m - m_a); O_R += P_a V_aR, and under it
//        m_b = max(m_a, rowmax S_b), P_b = 2^(S_b - m_b) | O_R *= 2^(m_a - m_b); O_R += P_b V_bR
//
// so one warpgroup's softmax runs while the other's MMAs keep the tensor cores busy, and a
// whole tile's scores are one N = 64 MMA group. Each P is rounded to bf16 once: its owner
// multiplies it from registers, the other warpgroup reads the same values from one 64 x 64
// block of shared memory (P_a, then P_b once P_a is read). The warpgroups hand over m and P at
// two CTA-half barriers per pair (X: m_a and P_a; Y: m_b and P_b). Both end a pair with the
// same running maximum m; each sums its own tiles' P. The maxima follow every rise (not the
// other wgmma kernels' margin, running_max.cuh: it gains nothing here).
//
// Loads: a ninth warp only copies. It fills stage tt % 2 with tile tt as soon as both
// warpgroups have released the stage's previous tile (empty barrier, one arrival per consumer
// warp after its last wgmma on the tile), with cp.async, one warp instruction moving four whole
// 128-byte row segments; a fill is complete when the copying warp's copies have landed and every
// consumer thread has arrived (full barrier, common/mbarrier.cuh), so the computing warps never
// issue a copy or wait at a CTA barrier in the loop. Draft positions take V from v_extend,
// copied by the tile's owner over K's first 512 columns after its QK. Split-KV partial states
// have the format of the other paths.
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

namespace kdtree {
namespace wgmma_seesaw {

using namespace wgmma_path;  // the KV tile layout and its staging (kv_staging.cuh)

constexpr int kRows = 64;                   // query rows per CTA (the MMA's M)
constexpr int kConsumers = 256;             // two warpgroups computing
constexpr int kThreads = kConsumers + 128;  // and a warpgroup copying KV tiles
constexpr int kConsumerRegisters = 232;     // per thread, after the copying warpgroup gives back
constexpr int kCopierRegisters = 40;        // all but these (setmaxnreg)
constexpr int kHalfDims = kValueDim / 2;    // value dims per warpgroup
constexpr int kQBytes = kColBlocks * kBlockBytes;  // Q staged like a KV tile (64 rows)
constexpr int kDraftWords = 2 * kMaxDraft;
constexpr int kPBytes = kRows * 128;        // P_a, then P_b: 64 x 64 bf16, 128-byte swizzled like Q
constexpr int kLoadsPerRow = 2;             // threads of a warpgroup copying one row's draft V
constexpr int kSmemBytes = 1024 /* alignment slack */ + kStages * kStageBytes + kQBytes + kPBytes +
                           4 * 8 /* full and empty barriers per stage */ + 4 * kRows * 4 /* m_a, m_b; row sums */ +
                           kDraftWords * 4;
static_assert(kSmemBytes <= 232448, "Hopper's opt-in shared memory per block");
static_assert(kStages == 2, "a pair of tiles: stage 0 holds tile a, stage 1 tile b");

// S = Q . K^T over 576 dims for a whole tile: step i = (column block i / 4, k16 step i % 4),
// offsets in 16-byte units (Q and the tile have the same block layout).
template <int... I>
__device__ __forceinline__ void qk_steps(float* s, uint32_t q_desc, uint32_t k_desc,
                                         std::integer_sequence<int, I...>) {
  (wgmma::MmaSS64::run<((I / 4) * kBlockBytes + (I % 4) * 32) / 16, ((I / 4) * kBlockBytes + (I % 4) * 32) / 16>(
       s, q_desc, k_desc, I != 0), ...);
}

// O += P . V, P K-major in shared memory: k16 step i = positions [16 i, 16 i + 16) (+32 bytes
// of P, two 8-row groups = 2048 bytes of the N-major V).
template <int... I>
__device__ __forceinline__ void pv_steps_shared(float* acc, uint32_t p_desc, uint32_t v_desc,
                                                std::integer_sequence<int, I...>) {
  (wgmma::MmaSS256::run<(I * 32) / 16, (I * 2048) / 16>(acc, p_desc, v_desc), ...);
}

// O += P . V, P from this warpgroup's registers: p[4 i..4 i + 3] the bf16 pairs of k16 step i.
template <int... I>
__device__ __forceinline__ void pv_steps_registers(float* acc, const uint32_t* p, uint32_t v_desc,
                                                   std::integer_sequence<int, I...>) {
  (wgmma::MmaRS256::run<(I * 2048) / 16>(acc, p + 4 * I, v_desc), ...);
}

// Scale and mask a tile's scores (log2 units) in place; returns this thread's two row maxima
// over the quad in mx[0..1]. `vis`: row_visible_bits() of the tile.
__device__ __forceinline__ void mask_and_row_max(float* s, uint32_t vis, float scale, float* mx) {
  mx[0] = mx[1] = -INFINITY;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const float v = (vis >> i) & 1u ? s[i] * scale : -INFINITY;
    s[i] = v;
    mx[fragment_row_half(i)] = fmaxf(mx[fragment_row_half(i)], v);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
  }
}

// P = 2^(s - base) rounded to bf16 into p[16] (the k16 steps' register operands); adds the
// rows' sums of P to sum[0..1].
__device__ __forceinline__ void form_p(const float* s, const float* base, uint32_t* p, float* sum) {
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const int h = fragment_row_half(i);  // s[i], s[i + 1]: row half h, positions 8 (i / 4) + 2 t, + 1
    const float p0 = exp2_approx(s[i] - base[h]), p1 = exp2_approx(s[i + 1] - base[h]);
    sum[h] += p0 + p1;
    p[i / 2] = pack_bf16(p0, p1);
  }
}

// This thread's P (form_p()) into the K-major P block at `p_block` (rows qrow[0..1]), made
// visible to the other warpgroup's wgmma reads.
__device__ __forceinline__ void store_p(const uint32_t* p, uint32_t p_block, const int* qrow, int t) {
#pragma unroll
  for (int i = 0; i < 32; i += 2)
    asm volatile("st.shared.b32 [%0], %1;\n"
                 :: "r"(p_block + wgmma::swizzled(qrow[fragment_row_half(i)], i / 4) + 4 * t), "r"(p[i / 2])
                 : "memory");
  wgmma::fence_shared_for_async();
}

// acc *= f[row half] for this thread's 128 accumulators, skipped when no row of the warp moves.
__device__ __forceinline__ void rescale(float* acc, const float* f) {
  if (__any_sync(0xffffffffu, f[0] != 1.f || f[1] != 1.f))
#pragma unroll
    for (int i = 0; i < kHalfDims / 2; ++i) acc[i] *= f[fragment_row_half(i)];
}

__device__ __forceinline__ float finite_or_zero(float m) { return m == -INFINITY ? 0.f : m; }

__global__ void __launch_bounds__(kThreads, 1)
verify_seesaw_kernel(const VerifyParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  prefetch_extent_lines(p, blockIdx.y);  // L2 prefetches only, ahead of the wait
  wait_for_prior_grids();  // before any global access (inputs, workspace)
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_address(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzled blocks start on 1024 bytes
  const uint32_t q_addr = base + kStages * kStageBytes;
  const uint32_t p_block = q_addr + kQBytes;
  const uint32_t full = p_block + kPBytes;  // stage s's barriers: full + 8 s (landed), empty + 8 s (free)
  const uint32_t empty = full + 16;
  float* m_shared = reinterpret_cast<float*>(smem_raw + (full + 32 - raw));  // [2][64]: m_a, m_b
  float* row_sum = m_shared + 2 * kRows;                                       // [2][64]
  uint32_t* draft_vis = reinterpret_cast<uint32_t*>(row_sum + 2 * kRows);
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);  // 2: the copying warp
  const int wtid = tid % 128, warp = wtid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;

  const int64_t H = p.heads;
  CtaWork work;
  if (!cta_work_in_balanced_grid(p, kRows, kMinChunkWgmma, kTile, &work)) return;
  const auto& [ext, rows, row0, length, split, j_begin, j_end, mask_base, half_idle] = work;
  const int64_t prefix = ext.prefix, qo_start = ext.qo_start;

  // this thread's rows of the block, qrow[0] = 16 warp + g (s[4k], s[4k + 1]) and qrow[0] + 8
  // (s[4k + 2], s[4k + 3]); their draft tokens (-1: padding)
  int tok_of[2];
  const uint32_t valid_bits = row_tokens<32>(row0 + 16 * warp + g, rows, H, tok_of);
  const int qrow[2] = {16 * warp + g, 16 * warp + g + 8};  // this thread's rows in the block

  float acc[kHalfDims / 2];  // acc[4k + e]: row lo/hi (e / 2), dim 256 wg + 8k + 2t + e % 2
#pragma unroll
  for (int i = 0; i < kHalfDims / 2; ++i) acc[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

  const int load_r = wtid / kLoadsPerRow, load_c = wtid % kLoadsPerRow;  // draft V rows
  const int64_t num_tiles = j_begin < j_end ? ceil_div(j_end - j_begin, kTile) : 0;
  // warpgroup 2 copies tile tt into stage tt % 2 once its previous fill is released, then returns
  if (run_copier_warpgroup<kThreads, kCopierRegisters, kConsumerRegisters>(p, ext, base, j_begin, j_end, num_tiles,
                                                                          full, empty, tid, wg, warp, lane))
    return;

  if (num_tiles > 0) {
    load_q_rows<kConsumers, kRows>(p, q_addr, row0, rows, qo_start, tid);
    for (int st = 0; st < 2 && st < num_tiles; ++st) mbarrier::arrive_after_copies(full + 8 * st);  // (Q)
    if (j_end > prefix) stage_draft_visibility<kConsumers>(p, mask_base, length, prefix, ext.qo_len, draft_vis);
  }
  wgmma::named_barrier(3, kConsumers);  // the draft visibility bits

  const float scale = static_cast<float>(p.scale_log2);
  const uint32_t q_desc = wgmma::descriptor_low(q_addr, 16);
  const uint32_t stage_a = base, stage_b = base + kStageBytes;
  const uint32_t p_desc = wgmma::descriptor_low(p_block, 16);
  const uint32_t v_desc_a = wgmma::descriptor_low(stage_a + wg * 4 * kBlockBytes, kBlockBytes);
  const uint32_t v_desc_b = wgmma::descriptor_low(stage_b + wg * 4 * kBlockBytes, kBlockBytes);
  float* m_a_shared = m_shared;          // [64]: tile a's new running maximum, from WG0
  float* m_b_shared = m_shared + kRows;  // [64]: the pair's maximum, from WG1
  const int64_t num_pairs = ceil_div(num_tiles, 2);
  for (int64_t k = 0; k < num_pairs; ++k) {
    const int64_t ja = j_begin + 2 * k * kTile, jb = ja + kTile;
    const bool has_b = 2 * k + 1 < num_tiles, next_a = 2 * k + 2 < num_tiles, next_b = 2 * k + 3 < num_tiles;
    const uint32_t parity = static_cast<uint32_t>(k & 1);
    const int64_t j_own = wg == 0 ? ja : jb;  // the tile whose scores this warpgroup computes
    const uint32_t own_stage = wg == 0 ? stage_a : stage_b;
    const bool own_tile = wg == 0 || has_b;

    // -- S = Q . K^T of this warpgroup's tile (N = 64, 36 k16 steps), masked and scaled
    float s[32], mx[2] = {-INFINITY, -INFINITY};
    if (own_tile) {
#pragma unroll
      for (int i = 0; i < 32; ++i) s[i] = 0.f;
      mbarrier::wait(full + 8 * wg, parity);
      wgmma::fence_shared_for_async();
      wgmma::fence();
      qk_steps(s, q_desc, wgmma::descriptor_low(own_stage, 16), std::make_integer_sequence<int, kColBlocks * 4>{});
      wgmma::commit();
      wgmma::wait<0>();
#pragma unroll
      for (int i = 0; i < 32; ++i) wgmma::pin(s[i]);
      // draft positions take their V from v_extend (before the other warpgroup's PV)
      if (j_own + kTile > prefix && j_end > prefix) {
        load_draft_values<kLoadsPerRow>(p, ext, own_stage, j_own, j_end, load_r, load_c);
        cp_async_wait<0>();
        wgmma::fence_shared_for_async();
      }
      const uint32_t vis = j_own + kTile <= prefix && j_own + kTile <= j_end
          ? valid_bits
          : row_visible_bits<32>(draft_vis, prefix, j_own + 2 * t, j_end, tok_of[0], tok_of[1]);
      mask_and_row_max(s, vis, scale, mx);
    }

    uint32_t p_own[16];
    float sum[2] = {0.f, 0.f};
    if (wg == 0) {
      // -- m_a, P_a; hand both to warpgroup 1; O_L = O_L 2^(m - m_a) + P_a V_aL
      float base_a[2], alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float m_a = fmaxf(m_run[h], mx[h]);
        base_a[h] = finite_or_zero(m_a);
        alpha[h] = exp2_approx(m_run[h] - base_a[h]);
        m_run[h] = m_a;
        if (t == 0) m_a_shared[qrow[h]] = m_a;
      }
      form_p(s, base_a, p_own, sum);
#pragma unroll
      for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * alpha[h] + sum[h];
      wgmma::named_barrier(4, 128);  // every warp of warpgroup 0 is done reading P_b (last pair)
      store_p(p_own, p_block, qrow, t);
      wgmma::named_barrier(1, kConsumers);  // X: m_a and P_a (and tile a's draft V) are in shared memory
      rescale(acc, alpha);
      wgmma::fence();
      pv_steps_registers(acc, p_own, v_desc_a, std::make_integer_sequence<int, kTile / 16>{});
      wgmma::commit();
      wgmma::named_barrier(2, kConsumers);  // Y: m_b and P_b from warpgroup 1 (P_a read)
      float scale_b[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float m_b = m_b_shared[qrow[h]];
        scale_b[h] = exp2_approx(m_run[h] - finite_or_zero(m_b));
        m_run[h] = m_b;
        l_run[h] *= scale_b[h];
      }
      wgmma::wait<0>();
#pragma unroll
      for (int i = 0; i < kHalfDims / 2; ++i) wgmma::pin(acc[i]);
      release_stage(full, empty, next_a, lane);  // warpgroup 0 is done with tile a
      rescale(acc, scale_b);
      if (has_b) {  // O_L += P_b V_bL (P_b from shared memory)
        mbarrier::wait(full + 8, parity);
        wgmma::fence_shared_for_async();
        wgmma::fence();
        pv_steps_shared(acc, p_desc, v_desc_b, std::make_integer_sequence<int, kTile / 16>{});
        wgmma::commit();
        wgmma::wait<0>();
#pragma unroll
        for (int i = 0; i < kHalfDims / 2; ++i) wgmma::pin(acc[i]);
      }
      release_stage(full + 8, empty + 8, next_b, lane);  // and with tile b
    } else {
      // -- O_R = O_R 2^(m - m_a) + P_a V_aR, and under it m_b, P_b (handed to warpgroup 0)
      wgmma::named_barrier(1, kConsumers);  // X
      float m_a[2], alpha[2], base_b[2], scale_b[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        m_a[h] = m_a_shared[qrow[h]];
        alpha[h] = exp2_approx(m_run[h] - finite_or_zero(m_a[h]));
      }
      rescale(acc, alpha);
      mbarrier::wait(full, parity);  // tile a's value blocks 4-7
      wgmma::fence_shared_for_async();
      wgmma::fence();
      pv_steps_shared(acc, p_desc, v_desc_a, std::make_integer_sequence<int, kTile / 16>{});
      wgmma::commit();
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float m_b = fmaxf(m_a[h], mx[h]);
        base_b[h] = finite_or_zero(m_b);
        scale_b[h] = exp2_approx(m_a[h] - base_b[h]);
        l_run[h] *= alpha[h] * scale_b[h];
        m_run[h] = m_b;
        if (t == 0) m_b_shared[qrow[h]] = m_b;
      }
      if (has_b) form_p(s, base_b, p_own, sum);
#pragma unroll
      for (int h = 0; h < 2; ++h) l_run[h] += sum[h];
      wgmma::wait<0>();
#pragma unroll
      for (int i = 0; i < kHalfDims / 2; ++i) wgmma::pin(acc[i]);
      wgmma::named_barrier(5, 128);  // every warp of warpgroup 1 is done reading P_a
      if (has_b) store_p(p_own, p_block, qrow, t);
      wgmma::named_barrier(2, kConsumers);  // Y: m_b and P_b (and tile b's draft V) are in shared memory
      release_stage(full, empty, next_a, lane);  // warpgroup 1 is done with tile a
      rescale(acc, scale_b);
      if (has_b) {  // O_R += P_b V_bR (P_b from registers)
        wgmma::fence();
        pv_steps_registers(acc, p_own, v_desc_b, std::make_integer_sequence<int, kTile / 16>{});
        wgmma::commit();
        wgmma::wait<0>();
#pragma unroll
        for (int i = 0; i < kHalfDims / 2; ++i) wgmma::pin(acc[i]);
      }
      release_stage(full + 8, empty + 8, next_b, lane);  // and with tile b
    }
  }
  cp_async_wait<0>();
  allow_dependents_at_epilogue(half_idle);

  // -- row sums over the quad and both warpgroups; the output rows or the split's partial state
  write_row_halves<false>(p, split, row0, rows, qo_start, tok_of, qrow, m_run, l_run, acc, row_sum, nullptr, false,
                          wg, t, [] { wgmma::named_barrier(3, kConsumers); });
#else
  __trap();  // built for another architecture: the plan never picks this path there
#endif
}

}  // namespace wgmma_seesaw
}  // namespace kdtree
