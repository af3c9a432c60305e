// The rows kernel's short layout for one short request (bs 1, 33-64 rows), chosen on the
// device from the request's length, so a captured CUDA graph serves every length. When the
// request's KV is short enough that the grid's own layout (one 64-row CTA per split) leaves at
// least half of its splits without KV, the CTAs instead take the rows in blocks of 16 and the
// KV in a quarter of the splits: CTA z takes row block z % B and split z / B of S = splits / B,
// B = ceil(n_max * H / 16); CTAs past B * S have no work. Each CTA still runs the 64-row body
// (rows past its block are padding), but writes a quarter of the partials and stages a
// quarter of Q, and four times as many SMs have work. The same code runs in both layouts: a
// second, 16-row body in the kernel makes its code twice as long, and the 64-row body then
// misses the instruction cache (docs/experiments.md, 18).
// The rows kernel's fp16 build for calls that may take it writes fp32 partial states in it
// (split_plan.h: partial_build()).
// -DKDTREE_NO_SHORT_LAYOUT never takes it (A/B).
#pragma once
#include <cstdint>

#include "../common/request_extent.cuh"
#include "../common/row_result.cuh"
#include "../split_plan.h"
#include "../verify_params.h"
#include "kv_staging.cuh"

namespace kdtree {
namespace wgmma_path {

constexpr int64_t kShortBlockRows = kShortLayoutBlockRows;

// True when this call runs in the short layout; then *c is this CTA's place in it and
// *block_rows its rows per block. Every CTA of the call decides alike (one request, its
// extent `ext` from device memory: cta_extent()). A CTA in the layout also marks its row
// block's splits past the layout's S (S + its split, 2 S + ...) as having seen nothing, so
// the combine, which reads every split of the grid, weighs them 0. Call from every thread.
__device__ __forceinline__ bool enter_short_layout(const VerifyParams& p, const RequestExtent& ext, CtaCoord* c,
                                                   int64_t* block_rows) {
#if defined(KDTREE_NO_SHORT_LAYOUT)
  return false;
#else
  if (!short_layout_possible(p.bs, p.row_blocks, p.n_max * p.heads, p.num_splits)) return false;
  // 32-bit layout arithmetic: at most 64 rows (4 blocks) and kMaxSplitsTiled splits, 2 or more per block
  const uint32_t blocks = static_cast<uint32_t>(ceil_div(p.n_max * p.heads, kShortBlockRows));
  const uint32_t splits = static_cast<uint32_t>(p.num_splits) / blocks;
  // short: the grid's own layout would leave its upper half of splits without KV (the
  // division-free case of splits_idle_from(): num_splits >= 2 here)
  const int64_t half = p.num_splits / 2;
  __builtin_assume(2 * half <= p.num_splits);
  if (!splits_idle_from(ext.prefix + ext.qo_len, p.num_splits, half, kMinChunkWgmma, kTile)) return false;
  const uint32_t cta = blockIdx.z;
  *c = {cta % blocks, 0, cta / blocks, splits, false};
  *block_rows = kShortBlockRows;
  if (c->split >= splits) {
    c->row_block = blocks;  // past every row: cta_work() gives it nothing to do
    return true;
  }
#if !defined(KDTREE_FAULT_SHORT_LAYOUT_UNMARKED)  // negative control: the marks are not written
  const int64_t row = c->row_block * kShortBlockRows + threadIdx.x;
  if (threadIdx.x < kShortBlockRows && row < ext.qo_len * p.heads) {
    int64_t tok, head;
    row_token_head(row, p.heads, &tok, &head);
    for (int64_t d = c->split + splits; d < p.num_splits; d += splits)  // this row's splits past S
      write_row_result(p, d, ext.qo_start + tok, head, -INFINITY, 0.f, true, [](__nv_bfloat16*, float) {},
                       [](float*) {});
  }
#endif
  return true;
#endif
}

}  // namespace wgmma_path
}  // namespace kdtree
