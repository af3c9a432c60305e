// The batch layout: how the CTAs of a batch (p.base_splits < p.num_splits: the plan gives the
// workspace kBatchSlotsFactor slots per grid split, split_plan.h) share its requests' KV.
// Every CTA reads the batch's lengths from device memory and makes the same plan, so a captured
// CUDA graph serves any lengths. The plan's chunk C (KV positions: whole tiles, at least the
// path's fewest) is the smallest with which request r, cut into
// request_pieces(L_r) = min(slots, ceil(L_r / C)) pieces (at least 1), leaves the batch at most
// G = bs x grid_splits pieces, one per CTA of a row block; CTA (y, z) of the grid takes piece
// number y x grid_splits + z in request order, and none past the last. With equal lengths that
// is the grid's own layout (C = ceil(L / grid_splits), piece z of request y); with unequal ones
// a long request is cut into up to `slots` pieces and a short one into fewer than grid_splits,
// so every SM's share of the batch's positions comes out near the mean instead of waiting on
// the longest request. A request's slots past its pieces are marked as having seen nothing by
// the CTA with its last piece (mark_slots_empty()), since the combine reads every slot.
//
// batch_layout_place() and mark_slots_empty() are out of line, in 32-bit arithmetic, with the
// call's sizes by value: inlined, the plan's code slows every kernel, calls that never run it
// too (docs/experiments.md, 32); a reference to the kernel's parameters would copy them to
// local memory. The wgmma
// kernels' builds for calls without the batch layout leave all of it out (cta_place()).
#pragma once
#include <cstdint>

#include "../split_plan.h"
#include "../verify_params.h"
#include "load_index.cuh"
#include "row_result.cuh"

namespace kdtree {

// Request b's length (prefix + draft tokens) as the plan counts it: the prefix clamped to
// [0, min(kv_indices_len, 2^30)] and the draft tokens to [0, n_max]. The CTAs cut each request's
// own clamped extent (request_extent()) into its pieces, so any length the plan counts covers it.
__device__ __forceinline__ uint32_t planned_length(const void* qo_indptr, const void* kv_indptr, int64_t qo_is_64,
                                                   int64_t kv_is_64, int64_t n_max, int64_t kv_indices_len,
                                                   int64_t b) {
  int64_t prefix = load_index(kv_indptr, kv_is_64, b + 1) - load_index(kv_indptr, kv_is_64, b);
  int64_t drafts = load_index(qo_indptr, qo_is_64, b + 1) - load_index(qo_indptr, qo_is_64, b);
  const int64_t most = kv_indices_len < (int64_t{1} << 30) ? kv_indices_len : int64_t{1} << 30;
  prefix = prefix < 0 ? 0 : prefix > most ? most : prefix;
  drafts = drafts < 0 ? 0 : drafts > n_max ? n_max : drafts;
  return static_cast<uint32_t>(prefix + drafts);
}

__device__ __forceinline__ uint32_t request_pieces(uint32_t length, uint32_t chunk, uint32_t slots) {
  const uint32_t pieces = length == 0 ? 1u : (length - 1) / chunk + 1;
  return pieces < slots ? pieces : slots;
}

__device__ __forceinline__ uint32_t warp_sum(uint32_t v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// The batch's total (64-bit: up to bs x 2^30) and longest length (planned_length()).
struct BatchLengths {
  uint64_t total;
  uint32_t longest;
};

// batch_lengths() over the call's indptrs, in every lane of the calling warp; all 32 lanes
// must call. (Not redux.sync: ptxas then moves the rows kernel's loop values between vector
// and uniform registers in every tile; docs/experiments.md, 33.)
__device__ __forceinline__ BatchLengths batch_lengths(const VerifyParams& p) {
  const uint32_t bs = static_cast<uint32_t>(p.bs);
  BatchLengths sums = {0, 0};
  for (uint32_t b = threadIdx.x % 32; b < bs; b += 32) {
    const uint32_t l = planned_length(p.qo_indptr, p.kv_indptr, p.qo_is_64, p.kv_is_64, p.n_max, p.kv_indices_len, b);
    sums.total += l;
    sums.longest = sums.longest > l ? sums.longest : l;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    sums.total += __shfl_xor_sync(0xffffffffu, sums.total, off);
    sums.longest = max(sums.longest, __shfl_xor_sync(0xffffffffu, sums.longest, off));
  }
  return sums;
}

// Whether a batch of `bs` requests with these lengths is uneven enough for the batch layout:
// its longest request is over 5/4 of the mean length. Otherwise the call keeps the grid's own
// layout (each request in its grid splits), which costs no plan. The main kernels decide
// alike, each from batch_lengths().
__host__ __device__ __forceinline__ bool lengths_uneven(const BatchLengths& lengths, int64_t bs) {
  return 4ull * lengths.longest * static_cast<uint64_t>(bs) > 5ull * lengths.total;
}

// This CTA's place in the batch layout for `slots` workspace slots and `grid_splits` grid
// splits per request, chunks of whole `tile`s of at least `min_chunk` positions, given the
// batch's `total` and `longest` length (batch_lengths()):
// request << 16 | piece << 8 | the request's pieces (below 256: kMaxSplitsTiled), or -1 when
// the plan leaves this CTA no piece. Called by every thread of the CTA (all 32 lanes of each
// warp); every warp computes the same plan.
__device__ __noinline__ int32_t batch_layout_place(const void* qo_indptr, const void* kv_indptr, int64_t qo_is_64,
                                                   int64_t kv_is_64, int64_t bs64, int64_t n_max,
                                                   int64_t kv_indices_len, uint64_t total, uint32_t longest,
                                                   int64_t slots64, int64_t grid_splits64, int64_t tile64,
                                                   int64_t min_chunk64) {
  static_assert(kMaxSplitsTiled < 256, "pieces and slots fit 8 bits");
  const uint32_t bs = static_cast<uint32_t>(bs64), slots = static_cast<uint32_t>(slots64);
  const uint32_t grid_splits = static_cast<uint32_t>(grid_splits64), tile = static_cast<uint32_t>(tile64);
  const uint32_t min_chunk = static_cast<uint32_t>(min_chunk64);
  const uint32_t lane = threadIdx.x % 32;
  const auto length = [&](uint32_t b) {
    return planned_length(qo_indptr, kv_indptr, qo_is_64, kv_is_64, n_max, kv_indices_len, b);
  };
  const uint32_t grid = bs * grid_splits;
  const auto whole_tiles = [&](uint64_t positions) {
    const uint64_t p = positions < min_chunk ? min_chunk : positions;
    return static_cast<uint32_t>((p + tile - 1) / tile * tile);
  };
  const auto pieces_at = [&](uint32_t chunk) {
    uint32_t sum = 0;
#pragma unroll 1
    for (uint32_t b = lane; b < bs; b += 32) sum += request_pieces(length(b), chunk, slots);
    return warp_sum(sum);
  };
  // bisection between a chunk that always fits (each request in at most grid_splits pieces) and
  // the least that could (the mean share of a CTA); none when the lengths are equal
  uint32_t fits = whole_tiles((longest + grid_splits - 1) / grid_splits);
  uint32_t too_small = whole_tiles((total + grid - 1) / grid);
  if (too_small < fits) {
    if (pieces_at(too_small) <= grid) {
      fits = too_small;
    } else {
#pragma unroll 1
      while (fits - too_small > tile) {  // too_small gives more pieces than the grid has CTAs, fits does not
        const uint32_t mid = too_small + (fits - too_small) / (2 * tile) * tile;
        if (pieces_at(mid) <= grid) fits = mid; else too_small = mid;
      }
    }
  }
  const uint32_t chunk = fits;
  // the request whose pieces hold this CTA's piece number: an inclusive scan over groups of 32
  const uint32_t piece = blockIdx.y * grid_splits + blockIdx.z;
  uint32_t before = 0;  // pieces of the requests ahead of this group of 32
#pragma unroll 1
  for (uint32_t b0 = 0; b0 < bs; b0 += 32) {
    const uint32_t mine = b0 + lane < bs ? request_pieces(length(b0 + lane), chunk, slots) : 0u;
    uint32_t upto = mine;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const uint32_t other = __shfl_up_sync(0xffffffffu, upto, off);
      if (lane >= static_cast<uint32_t>(off)) upto += other;
    }
    const unsigned past = __ballot_sync(0xffffffffu, before + upto > piece);
    if (past) {
      const int owner = __ffs(past) - 1;
      const uint32_t first = before + __shfl_sync(0xffffffffu, upto - mine, owner);
      const uint32_t pieces = __shfl_sync(0xffffffffu, mine, owner);
      return static_cast<int32_t>((b0 + owner) << 16 | (piece - first) << 8 | pieces);
    }
    before += __shfl_sync(0xffffffffu, upto, 31);
  }
  return -1;
}

// Marks rows [row0, row_end) of the request whose tokens start at `qo_start` as having seen
// nothing in workspace slots [from, slots): (m, l) = (-inf, 0), which the combine weighs 0.
// `ws_ml`: the workspace's scalars, [slots, tokens, heads, kPartialScalars]. Any thread count.
__device__ __noinline__ void mark_slots_empty(float* ws_ml, int64_t tokens, int64_t heads, int64_t slots,
                                              int64_t qo_start, int64_t row0, int64_t row_end, int64_t from) {
#pragma unroll 1
  for (int64_t row = row0 + threadIdx.x; row < row_end; row += blockDim.x) {
    int64_t tok, head;
    row_token_head(row, heads, &tok, &head);
#pragma unroll 1
    for (int64_t d = from; d < slots; ++d) {
      const int64_t flat = partial_row(d, tokens, heads, qo_start + tok, head);
      *reinterpret_cast<float2*>(ws_ml + flat * kPartialScalars) = make_float2(-INFINITY, 0.f);
    }
  }
}

}  // namespace kdtree
