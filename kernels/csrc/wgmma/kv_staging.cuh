// Shared by both wgmma kernels: the KV tile layout in shared memory (64 positions, nine
// 128-byte-swizzled column blocks, two stages), its cp.async gather (the top of a loop
// iteration, the draft positions' V), the staging of the query rows and of a request's
// draft visibility bits (read per fragment by row_halves.cuh: row_visible_bits), and the
// softmax's 2^x.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "../common/mbarrier.cuh"
#include "../common/mma.cuh"
#include "../common/request_extent.cuh"
#include "../common/wgmma.cuh"
#include "../verify_params.h"

namespace kdtree {
namespace wgmma_path {

using bf16 = __nv_bfloat16;

constexpr int kTile = 64;                          // KV positions per tile
constexpr int kColBlocks = kHeadDim / 64;          // 128-byte column blocks per row
constexpr int kValueBlocks = kValueDim / 64;
constexpr int kBlockBytes = kTile * 128;           // one column block of a KV tile
constexpr int kStageBytes = kColBlocks * kBlockBytes;
constexpr int kStages = 2;

// 2^x by the hardware approximation alone (ex2.approx.ftz): the same result as exp2f for
// every result at or above 2^-126, 0 below (exp2f adds a denormal path, 4 more instructions);
// softmax weights that small vanish beside the row maximum's 1 either way
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void cp_async_16_to(uint32_t smem_dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(smem_dst), "l"(src), "r"(bytes));
}

// Row r of a swizzled block layout at shared address `base` (column blocks kBlockStride
// bytes apart) from the 576 bf16 at `src`: this thread copies the 16-byte chunks c0, c0 + TPR,
// ... of every column block (`bytes` 0: zeros, nothing read). Block offsets are immediates
// on both sides; only the 8 / TPR swizzled chunk offsets of the row and its chunk addresses
// live in registers.
template <int TPR, int kBlockStride>
__device__ __forceinline__ void copy_row_chunks(uint32_t base, int r, int c0, const bf16* src, int bytes) {
#pragma unroll
  for (int q = 0; q < 8 / TPR; ++q) {
    const int cc = c0 + q * TPR;
    const uint32_t dst = base + wgmma::swizzled(r, cc);
    const bf16* chunk = src + cc * 8;
#pragma unroll
    for (int blk = 0; blk < kColBlocks; ++blk) cp_async_16_to(dst + blk * kBlockStride, chunk + blk * 64, bytes);
  }
}

// Stage KV positions [j0, j0 + 64) into the swizzled tile at shared address `stage`; this
// thread copies its chunks (copy_row_chunks) of row r (`source` = kv_source() of that row).
// A row past the range (no bytes) points at the buffer's base, and its copies read nothing.
template <int TPR>
__device__ __forceinline__ void load_kv_tile(const VerifyParams& p, const RequestExtent& ext,
                                             uint32_t stage, int64_t j0, int64_t source, int r, int c0) {
  int bytes;
  const bf16* src = static_cast<const bf16*>(kv_row(p, ext, j0 + r, source, &bytes));
  copy_row_chunks<TPR, kBlockBytes>(stage, r, c0, src, bytes);
}

// Stage query rows [row0, row0 + ROWS) of the request (zeros past `rows`) as column blocks
// of ROWS x 128 bytes at `q_addr`, swizzled like a KV tile: the kThreadsPerRow threads of a
// row copy its 72 chunks, the row's address worked out once and every block offset an
// immediate (as load_kv_tile). A row past `rows` (no bytes) points at q's base, and its
// copies read nothing.
template <int kThreads, int ROWS>
__device__ __forceinline__ void load_q_rows(const VerifyParams& p, uint32_t q_addr, int64_t row0, int64_t rows,
                                            int64_t qo_start, int tid) {
  constexpr int kThreadsPerRow = kThreads / ROWS;
  static_assert(kThreads % ROWS == 0, "whole threads per Q row");
  static_assert(8 % kThreadsPerRow == 0 || kThreadsPerRow % 8 == 0, "a row's threads split its 8 chunks evenly");
  const int r = tid / kThreadsPerRow, c0 = tid % kThreadsPerRow;
  const int64_t row = row0 + r;
  const bf16* src = static_cast<const bf16*>(p.q);
  int bytes = 0;
  if (row < rows) {
    int64_t tok, head;
    row_token_head(row, p.heads, &tok, &head);
    src += (qo_start + tok) * p.q_stride_t + head * p.q_stride_h;
    bytes = 16;
  }
  if constexpr (kThreadsPerRow <= 8) {  // chunks c0, c0 + kThreadsPerRow, ... of every block
    copy_row_chunks<kThreadsPerRow, ROWS * 128>(q_addr, r, c0, src, bytes);
  } else {  // chunk c0 % 8 of blocks c0 / 8, c0 / 8 + kThreadsPerRow / 8, ...
    constexpr int kBlockStep = kThreadsPerRow / 8;
    const int first = c0 / 8;
    const uint32_t dst = q_addr + first * (ROWS * 128) + wgmma::swizzled(r, c0 % 8);
    const bf16* chunk = src + first * 64 + (c0 % 8) * 8;
#pragma unroll
    for (int k = 0; k * kBlockStep < kColBlocks; ++k)
      if (first + k * kBlockStep < kColBlocks)
        cp_async_16_to(dst + k * kBlockStep * (ROWS * 128), chunk + k * kBlockStep * 64, bytes);
  }
}

// Top of a main-loop iteration: this thread's copies of tile `it` landed and, after the
// barrier, every thread's (and the other stage is no longer read). Returns the KV source of
// this thread's row (r) of the next tile (-1: there is none) from the slot index loaded a
// tile ago (*next_index), and loads the one a tile further.
__device__ __forceinline__ int64_t await_tile(const VerifyParams& p, const RequestExtent& ext, int64_t j0,
                                              int64_t j_end, bool load_next, int r, int c0, int64_t* next_index) {
  cp_async_wait<0>();
  wgmma::fence_shared_for_async();
  __syncthreads();
  int64_t next_source = -1;
  if (load_next) {
    const int64_t jn = j0 + kTile + r;
    next_source = kv_source_of(p, ext, jn, j_end, *next_index, c0 == 0);
    *next_index = prefix_index_ahead(p, ext, jn + kTile, j_end);
  }
  return next_source;
}

// Copying warp cw's share (rows 16 cw + 4 gi + row_sub, gi < 4) of the fill of `stage` with
// KV positions [j0, j0 + 64): lane (row_sub = lane / 8, cc = lane % 8) copies 16-byte chunk cc
// of its rows in every column block, so one warp instruction moves four whole 128-byte row
// segments. raw[gi]: the slot index of row 16 cw + 4 gi + row_sub (prefix_index_ahead()).
// Block and row-group offsets are immediates.
__device__ __forceinline__ void fill_tile(const VerifyParams& p, const RequestExtent& ext, uint32_t stage, int64_t j0,
                                          int64_t j_end, const int64_t* raw, int cw, int lane) {
  const int row_sub = lane / 8, cc = lane % 8;
  // rows 16 cw + 4 gi + row_sub lie at swizzle phase row_sub (gi even) or row_sub + 4 (gi odd)
  const uint32_t rows = stage + cw * 16 * 128;
  const uint32_t dst_even = rows + wgmma::swizzled(row_sub, cc), dst_odd = rows + wgmma::swizzled(row_sub + 4, cc) - 512;
#pragma unroll
  for (int gi = 0; gi < 4; ++gi) {
    const int64_t j = j0 + 16 * cw + 4 * gi + row_sub;
    int bytes;
    const bf16* src = static_cast<const bf16*>(kv_row(p, ext, j, kv_source_of(p, ext, j, j_end, raw[gi], cc == 0), &bytes));
    const uint32_t dst = ((gi & 1) ? dst_odd : dst_even) + gi * 512;
#pragma unroll
    for (int blk = 0; blk < kColBlocks; ++blk) cp_async_16_to(dst + blk * kBlockBytes, src + cc * 8 + blk * 64, bytes);
  }
}

// The copying warpgroup's whole part (copier warp cw): tile tt (KV positions j_begin + 64 tt..)
// into stage tt % 2 at `base`, once the consumers have released that stage's previous fill
// (empty + 8 s, release_stage()); each fill counted into full + 8 s once its copies land.
// Returns when its last copies have landed.
__device__ __forceinline__ void copy_tiles(const VerifyParams& p, const RequestExtent& ext, uint32_t base,
                                           int64_t j_begin, int64_t j_end, int64_t num_tiles, uint32_t full,
                                           uint32_t empty, int cw, int lane) {
  int64_t raw[4];
  for (int64_t tt = 0; tt < num_tiles; ++tt) {
    const int64_t j0 = j_begin + tt * kTile;
#pragma unroll
    for (int gi = 0; gi < 4; ++gi) raw[gi] = prefix_index_ahead(p, ext, j0 + 16 * cw + 4 * gi + lane / 8, j_end);
    const uint32_t st = static_cast<uint32_t>(tt & 1);
    if (tt >= kStages) mbarrier::wait(empty + 8 * st, static_cast<uint32_t>(((tt >> 1) - 1) & 1));
    fill_tile(p, ext, base + st * kStageBytes, j0, j_end, raw, cw, lane);
    mbarrier::arrive_after_copies(full + 8 * st);
  }
  cp_async_wait<0>();
}

// Starts the copier pipeline of a CTA whose warpgroups 0 and 1 compute and warpgroup 2 copies
// (kThreads = 384): thread 0 sets each stage's full barrier (kThreads arrivals per fill: every
// thread once) and empty barrier (one arrival per computing warp), then the CTA syncs.
// Warpgroup 2 then drops to kCopierRegisters, runs copy_tiles() and gets true (its caller
// returns); the computing warpgroups raise theirs to kConsumerRegisters and get false.
template <int kThreads, int kCopierRegisters, int kConsumerRegisters>
__device__ __forceinline__ bool run_copier_warpgroup(const VerifyParams& p, const RequestExtent& ext, uint32_t base,
                                                     int64_t j_begin, int64_t j_end, int64_t num_tiles, uint32_t full,
                                                     uint32_t empty, int tid, int wg, int warp, int lane) {
  static_assert(kThreads == 384, "two computing warpgroups and one copying warpgroup");
  if (tid == 0) {
#pragma unroll
    for (int st = 0; st < kStages; ++st) {
      mbarrier::init(full + 8 * st, kThreads);
      mbarrier::init(empty + 8 * st, (kThreads - 128) / 32);
    }
  }
  __syncthreads();  // the barriers are initialised
  if (wg == 2) {
    wgmma::release_registers<kCopierRegisters>();
    copy_tiles(p, ext, base, j_begin, j_end, num_tiles, full, empty, warp, lane);
    return true;
  }
  wgmma::claim_registers<kConsumerRegisters>();
  return false;
}

// A consumer warp is done with the fill of stage `s` it last read (its wgmma reads have
// completed): when the stage has a next fill, count this thread into that fill's arrivals
// (full barrier) and, once per warp, free the stage for the copying warp (empty barrier).
__device__ __forceinline__ void release_stage(uint32_t full_s, uint32_t empty_s, bool next_fill, int lane) {
  if (!next_fill) return;
  mbarrier::arrive_after_copies(full_s);
  __syncwarp();
  if (lane == 0) mbarrier::arrive(empty_s);
}

// Draft positions of the tile at `stage` (KV positions [j0, j0 + 64)) take their V from
// v_extend: copied over K's first 512 columns (call once every warpgroup is done with K;
// this thread copies chunks c0, c0 + TPR, ... of row r). Commits a cp.async group.
template <int TPR>
__device__ __forceinline__ void load_draft_values(const VerifyParams& p, const RequestExtent& ext, uint32_t stage,
                                                  int64_t j0, int64_t j_end, int r, int c0) {
  const int64_t j = j0 + r;
  if (j >= ext.prefix && j < j_end) {
    const bf16* src = static_cast<const bf16*>(p.v_extend) + (ext.qo_start + j - ext.prefix) * p.ve_stride_t;
    for (int c = c0; c < kValueBlocks * 8; c += TPR)
      cp_async_16_to(stage + (c / 8) * kBlockBytes + wgmma::swizzled(r, c % 8), src + c * 8, 16);
  }
  cp_async_commit();
}

// Stage the request's draft visibility in shared memory: word 2 * tok + d / 32, bit d % 32
// = draft token tok sees draft column d (what draft_visible() says; a mask too short is
// flagged the same way). A warp assembles 32 columns with one ballot and has 16 mask bytes
// in flight at once, instead of one dependent load per score element later.
template <int kThreads>
__device__ __forceinline__ void stage_draft_visibility(const VerifyParams& p, int64_t mask_base, int64_t length,
                                                       int64_t prefix, int64_t qo_len, uint32_t* draft_vis) {
  constexpr int kWarps = kThreads / 32, kBatch = 16;
  const int warp_id = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int items = static_cast<int>(2 * qo_len);  // (token, 32-column half) pairs
  for (int first = 0; first < items; first += kBatch * kWarps) {
    uint32_t byte[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {  // loads only: all of them in flight
      const int item = first + u * kWarps + warp_id;
      const int64_t tok = item / 2, d = (item % 2) * 32 + lane;
      const int64_t idx = draft_mask_index(mask_base, length, prefix, tok, d);
      const bool read = p.mask && item < items && d < qo_len && idx >= 0 && idx < p.mask_len;
      byte[u] = read ? p.mask[idx] : 0u;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int item = first + u * kWarps + warp_id;
      const int64_t tok = item / 2, d = (item % 2) * 32 + lane;
      const bool cell = item < items && d < qo_len;
      bool vis = d <= tok;  // no mask: a causal chain
      if (p.mask) {
        const int64_t idx = draft_mask_index(mask_base, length, prefix, tok, d);
        if (cell && (idx < 0 || idx >= p.mask_len)) flag_error(p, kMaskTooShort);
        vis = byte[u] != 0u && (!p.causal || d <= tok);
      }
      const unsigned word = __ballot_sync(0xffffffffu, cell && vis);
      if (lane == 0 && item < items) draft_vis[item] = word;
    }
  }
}

}  // namespace wgmma_path
}  // namespace kdtree
