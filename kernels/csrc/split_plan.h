// Kernel path and split scheduling over the KV length. Everything here is chosen on the
// host from static sizes only (batch, heads, draft width, SM count, shared memory), so a
// captured CUDA graph stays valid for any lengths; each CTA derives its own KV range from
// the request's length in device memory.
#pragma once
#include <cstdint>

#include "verify_params.h"

namespace kdtree {

constexpr int kBlockM = 32;   // portable path: query rows (draft token x head) per CTA
constexpr int kBlockN = 32;   // KV positions per tile (both paths)
constexpr int kMaxSplits = 32;        // portable path
constexpr int kMaxSplitsTiled = 192;  // tiled and wgmma paths: room for one split per SM of any
                                      // current part (132 SMs on H100 and H200)
constexpr int kMinChunkTiled = 128;   // tiled path: fewest KV positions a split is given
constexpr int kMinChunkWgmma = 128;   // wgmma path: fewest KV positions a split is given

// Kernel paths. Portable: mma.sync, 4 warps, 32 rows, ~74 KB shared memory (any sm_90a or
// sm_120a part). Tiled: mma.sync, 8 warps, 32 or 64 rows, a 4-stage cp.async KV pipeline
// in ~225 KB of shared memory (sm_90a; needs the opt-in shared memory of a Hopper SM).
// Wgmma: Hopper warpgroup MMAs, two warpgroups per CTA, 64-position KV tiles in two
// stages (sm_90a only): 16 or 32 rows transposed (rows as the MMA's N; one warpgroup
// computing 16 rows and one only copying, or two of 16), or 64 rows as the MMA's M: below
// the seesaw threshold (runs_seesaw(): rows = draft tokens x heads, and the batch size) each
// warpgroup computes the scores of half a tile's positions and half of the value dims, tile
// after tile; from it the seesaw kernel (wgmma/verify_kernel_seesaw.cuh: each warpgroup a
// whole tile's scores, the two overlapping softmax and MMAs, a third warpgroup copying);
// 169,728-231,968 bytes of shared memory.
enum KernelPath : int64_t {
  kPathPortable = 0, kPathTiled32 = 1, kPathTiled64 = 2,
  kPathWgmma16 = 3, kPathWgmma32 = 4, kPathWgmma64 = 5,
};

// The 64-row wgmma path runs the seesaw kernel from kSeesawMinRows rows per request, and from
// kSeesawMinRowsLargeBatch rows in batches of kSeesawLargeBatch requests or more: below
// these its larger fixed cost per CTA is spread over too few tiles (docs/perf.md).
// -DKDTREE_ROWS_SERIAL never runs it; -DKDTREE_SEESAW_ROWS_ONLY keeps the 256-row threshold
// at every batch size (A/B).
constexpr int64_t kSeesawMinRows = 256;
constexpr int64_t kSeesawMinRowsLargeBatch = 128;
constexpr int64_t kSeesawLargeBatch = 32;
__host__ __device__ inline bool runs_seesaw(int64_t n_max, int64_t heads, int64_t bs) {
#if defined(KDTREE_ROWS_SERIAL)
  return false;
#elif defined(KDTREE_SEESAW_ROWS_ONLY)
  return n_max * heads >= kSeesawMinRows;
#else
  return n_max * heads >= (bs >= kSeesawLargeBatch ? kSeesawMinRowsLargeBatch : kSeesawMinRows);
#endif
}

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int64_t path_block_m(int64_t path) {
  switch (path) {
    case kPathTiled64: case kPathWgmma64: return 64;
    case kPathWgmma16: return 16;
    default: return 32;
  }
}

// Portable path: enough CTAs for about two waves, at most kMaxSplits, and no more than
// the workspace budget allows.
inline int64_t choose_num_splits(int64_t bs, int64_t row_blocks, int64_t total_rows,
                                 int64_t num_sms, int64_t workspace_budget_bytes) {
  int64_t ctas = bs * row_blocks;
  int64_t splits = ceil_div(2 * num_sms, ctas > 0 ? ctas : 1);
  if (splits > kMaxSplits) splits = kMaxSplits;
  int64_t per_split = total_rows * kPartialRowBytes;
  while (splits > 1 && splits * per_split > workspace_budget_bytes) --splits;
  return splits < 1 ? 1 : splits;
}

// Tiled and wgmma paths (one CTA per SM): the split count with the least estimated time,
// waves x (1 / splits + kCtaFixedCost) in units of one request's KV work, the smallest such;
// at most kMaxSplitsTiled and the workspace budget. The fixed cost per CTA (Q staging, the
// first tile's wait, the partial's write and its share of the combine) is taken as one
// 64-position tile of a 16k context: it makes one full wave beat two waves of half the work.
constexpr double kCtaFixedCost = 1.0 / 256;
inline int64_t choose_num_splits_tiled(int64_t bs, int64_t row_blocks, int64_t total_rows,
                                       int64_t num_sms, int64_t workspace_budget_bytes) {
  int64_t ctas = bs * row_blocks > 0 ? bs * row_blocks : 1;
  int64_t limit = 2 * ceil_div(num_sms, ctas);
  if (limit > kMaxSplitsTiled) limit = kMaxSplitsTiled;
  int64_t per_split = total_rows * kPartialRowBytes;
  auto time = [&](int64_t s) {
    return static_cast<double>(ceil_div(ctas * s, num_sms)) * (1.0 / static_cast<double>(s) + kCtaFixedCost);
  };
  int64_t best = 1;
  double best_time = time(1);
  for (int64_t s = 2; s <= limit; ++s) {
    if (s * per_split > workspace_budget_bytes) break;
    if (time(s) < best_time * (1.0 - 1e-9)) {
      best = s;
      best_time = time(s);
    }
  }
  return best;
}

// Batches (bs > 1, tiled and wgmma paths) take one of two schemes for unequal lengths.
//
// The batch layout (every kernel but the seesaw one, 2 or more grid splits per request): the
// grid keeps the `base` splits per request a batch of equal lengths needs, and the workspace
// has kBatchSlotsFactor x base slots per request, so a batch of uneven lengths
// (common/batch_layout.cuh) can cut a long request into more pieces than the grid's splits and
// a short one into fewer, with the grid's bs x base CTAs per row block.
constexpr int64_t kBatchSlotsFactor = 2;

// The balanced grid (the seesaw kernel's batches, 2 to kBalanceMaxBase splits): the plan gives
// the grid kBalanceFactor x the `base` splits a batch of equal lengths needs, and each request
// takes as many of them as its share of the batch's KV positions: exactly `base` when all
// lengths are equal (the extra splits stay empty), and 2 x base x length / mean (at least 1, at
// most the grid's) when the longest request is over 1.25 x the mean. `total` and `longest`: the
// sum and maximum of the batch's lengths. The seesaw kernel keeps it because the batch
// layout's code slows its calls (docs/perf.md).
constexpr int64_t kBalanceFactor = 2;
constexpr int64_t kBalanceMaxBase = 4;
__host__ __device__ inline int64_t request_splits(int64_t length, int64_t total, int64_t longest, int64_t bs,
                                                  int64_t base, int64_t grid) {
  if (total <= 0) return 1;
  const int64_t factor = 4 * longest * bs > 5 * total ? 2 : 1;
  const int64_t splits = factor * length * bs * base / total;
  return splits < 1 ? 1 : splits > grid ? grid : splits;
}

// Whether a call of this path and these sizes balances its batches in the grid (the seesaw
// kernel) rather than in the batch layout; static sizes only.
__host__ __device__ inline bool grid_balances(int64_t path, int64_t n_max, int64_t heads, int64_t bs) {
  return path == kPathWgmma64 && runs_seesaw(n_max, heads, bs);
}

// Whether a call of the 64-row path may run the rows kernel's short layout
// (wgmma/short_layout.cuh, which decides on the device from the request's length): one
// request in one row block (`rows` = draft tokens x heads), its 16-row blocks getting 2 or more
// of the `num_splits` splits each. Static sizes only; -DKDTREE_NO_SHORT_LAYOUT: never.
constexpr int64_t kShortLayoutBlockRows = 16;
__host__ __device__ inline bool short_layout_possible(int64_t bs, int64_t row_blocks, int64_t rows,
                                                      int64_t num_splits) {
#if defined(KDTREE_NO_SHORT_LAYOUT)
  return false;
#else
  return bs == 1 && row_blocks == 1 && num_splits >= 2 && num_splits / ceil_div(rows, kShortLayoutBlockRows) >= 2;
#endif
}

// Whether a call of the rows kernel (kPathWgmma64 below the seesaw threshold) runs its build
// with a copying warpgroup (wgmma/verify_kernel_rows.cuh: kCopier): one request in two row
// blocks (65-128 rows). Static sizes only; every other call keeps the build where every
// thread copies, which is faster there (docs/perf.md). -DKDTREE_ROWS_NO_COPIER: never (A/B).
__host__ __device__ inline bool rows_copier(int64_t bs, int64_t row_blocks) {
#if defined(KDTREE_ROWS_NO_COPIER)
  (void)bs;
  (void)row_blocks;
  return false;
#else
  return bs == 1 && row_blocks >= 2;
#endif
}

// The format of a call's partial states (verify_params.h), from its static sizes only (so a
// captured graph keeps its build, each kernel built for one format, chosen at launch): fp16
// values when the call runs the rows kernel (kPathWgmma64 below the seesaw threshold; the only
// kernel with fp16 builds) and would write at least kFp16PartialsMinBytes of fp32 values
// with at least kFp16PartialsMinSplits splits; else fp32. Below that the fp32 rows stay in L2
// until the combine reads them and fp16's scaling only adds work; the seesaw kernel gains
// nothing from fp16 and keeps fp32 (docs/perf.md).
// -DKDTREE_PARTIALS_FP32 / -DKDTREE_PARTIALS_FP16 fix the format of every rows-kernel call (A/B).
constexpr int64_t kFp16PartialsMinSplits = 16;
constexpr int64_t kFp16PartialsMinBytes = int64_t{16} << 20;
__host__ __device__ inline bool partials_fp16(int64_t path, int64_t n_max, int64_t heads, int64_t bs,
                                              int64_t num_splits, int64_t rows) {
  if (path != kPathWgmma64 || runs_seesaw(n_max, heads, bs) || num_splits < 2) return false;
#if defined(KDTREE_PARTIALS_FP16)
  (void)rows;
  return true;
#elif defined(KDTREE_PARTIALS_FP32)
  (void)rows;
  return false;
#else
  // rows <= kMaxDraft x kMaxHeads x batch; past 2^30 rows the bytes pass the threshold anyway
  return num_splits >= kFp16PartialsMinSplits &&
         (rows >= (int64_t{1} << 30) || num_splits * rows * kValueDim * 4 >= kFp16PartialsMinBytes);
#endif
}

// The build of the rows kernel and the combine a split call launches (static sizes only):
// fp32 partial states; fp16 ones (partials_fp16()); or, where the call may run the short layout
// (short_layout_possible()), fp16 ones except in it: a short request's context the static sizes
// cannot see, where fp16 is slower. That build writes fp32 there and records which format it
// wrote for the combine (common/partial_format.cuh: record_call_format()); the plain fp16
// build carries no fp32 epilogue, which costs the calls that never take the short layout.
enum PartialBuild : int { kPartialsFp32 = 0, kPartialsFp16 = 1, kPartialsFp16ShortFp32 = 2 };
__host__ __device__ inline PartialBuild partial_build(int64_t path, int64_t n_max, int64_t heads, int64_t bs,
                                                      int64_t row_blocks, int64_t num_splits, int64_t rows) {
  if (!partials_fp16(path, n_max, heads, bs, num_splits, rows)) return kPartialsFp32;
  return short_layout_possible(bs, row_blocks, n_max * heads, num_splits) ? kPartialsFp16ShortFp32 : kPartialsFp16;
}

// KV positions [begin, end) of split `split` for a request of `length` positions: equal
// chunks rounded up to whole tiles of `tile` positions (at least `min_chunk`), so every
// split starts on a tile boundary; trailing splits of a short request are empty.
__host__ __device__ inline void split_range(int64_t length, int64_t num_splits, int64_t split,
                                            int64_t* begin, int64_t* end,
                                            int64_t min_chunk = 0, int64_t tile = kBlockN) {
  int64_t chunk = ceil_div(ceil_div(length, num_splits), tile) * tile;
  if (chunk < min_chunk) chunk = min_chunk;
  int64_t b = split * chunk;
  int64_t e = b + chunk;
  *begin = b < length ? b : length;
  *end = e < length ? e : length;
}

// Whether split_range() over `num_splits` splits gives split `first`, and so every later split,
// none of a request's `length` positions. In the usual case (`first` at most half of the
// splits, `min_chunk` a whole number of tiles, as for every wgmma and tiled split) that is
// length <= first x min_chunk, with no division: a chunk above min_chunk comes from
// length > num_splits x min_chunk and is below length / num_splits + tile, and `first` of
// those fall short of length.
__host__ __device__ inline bool splits_idle_from(int64_t length, int64_t num_splits, int64_t first,
                                                 int64_t min_chunk, int64_t tile = kBlockN) {
  if (min_chunk >= tile && min_chunk % tile == 0 && 2 * first <= num_splits) return length <= first * min_chunk;
  int64_t begin, end;
  split_range(length, num_splits, first, &begin, &end, min_chunk, tile);
  return begin >= end;
}

}  // namespace kdtree
