// One request's extent, read from the indptrs in device memory and clamped so that no
// read ever leaves its tensor; bad lengths set debug flags (both kernel paths).
#pragma once
#include <cstdint>

#include "../split_plan.h"
#include "../verify_params.h"

namespace kdtree {

__device__ __forceinline__ int64_t load_index(const void* p, int64_t is_64, int64_t i) {
  return is_64 ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
}

__device__ __forceinline__ void flag_error(const VerifyParams& p, int bit) {
  if (p.debug_checks) atomicOr(p.error_flag, bit);
}

// Asks L2 for the lines holding request b's indptr entries (qo_indptr, kv_indptr and, with
// a mask, mask_indptr), which a main kernel's CTA reads first, in cta_extent() and
// cta_work(). Called before wait_for_prior_grids(): a prefetch reads nothing into the SM
// and L2 is where every SM's accesses meet, so a line fetched before an earlier grid writes
// it is updated by that write and never read stale. Measured on the H200 (same-run A/B,
// session 23): in the 61-call layer loop the CTAs with KV enter about 2.6 us before their
// wait ends, and a call took 0.21-0.28 us less; flushed single calls were unchanged
// (x median 1.000). -DKDTREE_NO_EARLY_PREFETCH: none (A/B).
__device__ __forceinline__ void prefetch_extent_lines(const VerifyParams& p, int64_t b) {
#if !defined(KDTREE_NO_EARLY_PREFETCH)
  if (threadIdx.x < 2) {  // thread 1: entry b + 1, on the next line when b + 1 starts one
    const int64_t i = b + threadIdx.x;
    const char* qo = static_cast<const char*>(p.qo_indptr) + i * (p.qo_is_64 ? 8 : 4);
    const char* kv = static_cast<const char*>(p.kv_indptr) + i * (p.kv_is_64 ? 8 : 4);
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(qo));
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(kv));
    if (p.mask) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p.mask_indptr + i));
  }
#endif
}

struct RequestExtent {
  int64_t qo_start, qo_len;  // draft tokens [qo_start, qo_start + qo_len) of q
  int64_t kv_start, prefix;  // prefix slots kv_indices[kv_start, kv_start + prefix)
};

// Request b's extent. `report`: this thread reports bad lengths (one thread per request).
// Returns false when the request's tokens lie outside q (nothing may be computed).
__device__ __forceinline__ bool request_extent(const VerifyParams& p, int64_t b, bool report,
                                               RequestExtent* r) {
  r->qo_start = load_index(p.qo_indptr, p.qo_is_64, b);
  r->qo_len = load_index(p.qo_indptr, p.qo_is_64, b + 1) - r->qo_start;
  r->kv_start = load_index(p.kv_indptr, p.kv_is_64, b);
  r->prefix = load_index(p.kv_indptr, p.kv_is_64, b + 1) - r->kv_start;
  if (r->qo_len < 0 || r->qo_len > p.n_max) {
    if (report) flag_error(p, kBadQoLength);
    r->qo_len = r->qo_len < 0 ? 0 : p.n_max;
  }
  if (r->qo_start < 0 || r->qo_start + r->qo_len > p.total_tokens) {
    if (report) flag_error(p, kTokensOutOfRange);
    return false;
  }
  if (r->prefix < 0) {
    if (report) flag_error(p, kBadKvLength);
    r->prefix = 0;
  }
  if (r->kv_start < 0 || r->kv_start + r->prefix > p.kv_indices_len) {
    if (report) flag_error(p, kIndicesTooShort);
    r->kv_start = r->kv_start < 0 ? 0 : r->kv_start;
    r->prefix = p.kv_indices_len - r->kv_start;
    if (r->prefix < 0) r->prefix = 0;
  }
  return true;
}

// Sum and maximum of the batch's request lengths (prefix + draft tokens, clamped as in
// request_extent()), in every lane of the calling warp; all 32 lanes must call.
__device__ __forceinline__ void batch_lengths(const VerifyParams& p, int64_t* total, int64_t* longest) {
  int64_t sum = 0, most = 0;
  for (int64_t b = threadIdx.x % 32; b < p.bs; b += 32) {
    int64_t prefix = load_index(p.kv_indptr, p.kv_is_64, b + 1) - load_index(p.kv_indptr, p.kv_is_64, b);
    int64_t drafts = load_index(p.qo_indptr, p.qo_is_64, b + 1) - load_index(p.qo_indptr, p.qo_is_64, b);
    prefix = prefix < 0 ? 0 : prefix;
    drafts = drafts < 0 ? 0 : drafts > p.n_max ? p.n_max : drafts;
    sum += prefix + drafts;
    most = most > prefix + drafts ? most : prefix + drafts;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const int64_t other = __shfl_xor_sync(0xffffffffu, most, off);
    most = most > other ? most : other;
  }
  *total = sum;
  *longest = most;
}

// A CTA's place in its call's layout: row block, request, split, and the splits each
// request's KV is cut into in that layout. grid_coord(): the launch grid's own layout (row
// block blockIdx.x, request blockIdx.y, split blockIdx.z of num_splits); a kernel may lay a
// short request out otherwise (wgmma/short_layout.cuh).
struct CtaCoord {
  int64_t row_block, request, split, splits;
};
__device__ __forceinline__ CtaCoord grid_coord(const VerifyParams& p) {
  return {static_cast<int64_t>(blockIdx.x), static_cast<int64_t>(blockIdx.y), static_cast<int64_t>(blockIdx.z),
          p.num_splits};
}

// What the CTA at `c` computes: its request's extent, rows (draft tokens x heads) and KV
// length (prefix + draft tokens), its first row, its split's KV positions [j_begin, j_end)
// and the request's mask offset.
struct CtaWork {
  RequestExtent ext;
  int64_t rows, row0, length, j_begin, j_end, mask_base;
  bool half_idle;  // a short request: the layout's upper half of splits holds none of its KV positions
};

// The extent of the request of the CTA at `c`; the first CTA of each request (row block 0,
// split 0) reports bad lengths. Called by every thread of the CTA; false as request_extent().
__device__ __forceinline__ bool cta_extent(const VerifyParams& p, const CtaCoord& c, RequestExtent* ext) {
  return request_extent(p, c.request, threadIdx.x == 0 && c.row_block == 0 && c.split == 0, ext);
}

// This CTA's work for `block_rows` rows per CTA and the path's split_range() sizes (over
// the request's share of the layout's splits: request_splits() where the grid balances
// unequal lengths), given its request's extent `ext` (cta_extent()). Called by every
// thread of the CTA. False when it has nothing to write: its row block lies past the
// request's rows.
__device__ __forceinline__ bool cta_work(const VerifyParams& p, const CtaCoord& c, const RequestExtent& ext,
                                         int64_t block_rows, int64_t min_chunk, int64_t tile, CtaWork* w) {
  const int64_t b = c.request, split = c.split;
  w->ext = ext;
  w->rows = ext.qo_len * p.heads;
  w->row0 = c.row_block * block_rows;
  if (w->row0 >= w->rows) return false;
  w->length = ext.prefix + ext.qo_len;
  int64_t splits = c.splits;  // this request's share of the layout's splits
  if (c.splits == p.num_splits && p.base_splits < p.num_splits) {
    int64_t total, longest;
    batch_lengths(p, &total, &longest);
    splits = request_splits(w->length, total, longest, p.bs, p.base_splits, p.num_splits);
  }
  split_range(w->length, splits, split, &w->j_begin, &w->j_end, min_chunk, tile);
  w->half_idle = splits_idle_from(w->length, splits, c.splits / 2, min_chunk, tile);
#ifdef KDTREE_FAULT_DROP_SPLIT  // negative control: the first split never writes its part
  if (p.num_splits > 1 && split == 0) return false;
#endif
  w->mask_base = p.mask ? p.mask_indptr[b] : 0;
  return true;
}

// cta_work() at the launch grid's own layout, reading the request's extent (false also when
// its tokens lie outside q).
__device__ __forceinline__ bool cta_work(const VerifyParams& p, int64_t block_rows, int64_t min_chunk,
                                         int64_t tile, CtaWork* w) {
  const CtaCoord c = grid_coord(p);
  RequestExtent ext;
  return cta_extent(p, c, &ext) && cta_work(p, c, ext, block_rows, min_chunk, tile, w);
}

// A slot index clamped into the KV buffer (a bad one is reported when `report`).
__device__ __forceinline__ int64_t clamp_slot(const VerifyParams& p, int64_t slot, bool report) {
  if (slot < 0 || slot >= p.kv_buffer_rows) {
    if (report) flag_error(p, kSlotOutOfRange);
    slot = slot < 0 ? 0 : p.kv_buffer_rows - 1;
  }
  return slot;
}

// The prefix slot of position j (< prefix), clamped into the KV buffer.
__device__ __forceinline__ int64_t prefix_slot(const VerifyParams& p, const RequestExtent& r,
                                               int64_t j, bool report) {
  return clamp_slot(p, p.kv_indices[r.kv_start + j], report);
}

// The KV row to stage for position j: -1 past j_end (zero-filled), -2 a draft position (K
// from k_extend), else the prefix slot (clamped). The tiled and wgmma paths fetch it a tile
// ahead of its use so the index load's latency hides behind a tile of math.
__device__ __forceinline__ int64_t kv_source(const VerifyParams& p, const RequestExtent& ext,
                                             int64_t j, int64_t j_end, bool report) {
  if (j >= j_end) return -1;
  if (j >= ext.prefix) return -2;
  return prefix_slot(p, ext, j, report);
}

// kv_source() in two halves, so that the index load is really a tile ahead of its use: the
// raw kv_indices entry of position j (0 unless j is a prefix position below j_end), read
// only by kv_source_of() a tile later; reading it at once (as clamping does) would wait
// for the load right where it is issued.
__device__ __forceinline__ int64_t prefix_index_ahead(const VerifyParams& p, const RequestExtent& ext,
                                                      int64_t j, int64_t j_end) {
  return j < j_end && j < ext.prefix ? p.kv_indices[ext.kv_start + j] : 0;
}

__device__ __forceinline__ int64_t kv_source_of(const VerifyParams& p, const RequestExtent& ext, int64_t j,
                                                int64_t j_end, int64_t raw_index, bool report) {
  if (j >= j_end) return -1;
  if (j >= ext.prefix) return -2;
  return clamp_slot(p, raw_index, report);
}

// Query row `row` of a request as (draft token, head). Rows are below kMaxDraft x kMaxHeads
// (< 2^32), so a 32-bit division does (a 64-bit one is a long software routine).
__device__ __forceinline__ void row_token_head(int64_t row, int64_t heads, int64_t* tok, int64_t* head) {
  const uint32_t r = static_cast<uint32_t>(row), h = static_cast<uint32_t>(heads);
  const uint32_t t = r / h;
  *tok = t;
  *head = r - t * h;
}

// Where the KV row of position j (its kv_source()) is read from, in bf16 elements: the
// prefix slot's row of k_buffer, the draft's row of k_extend, or past the range the
// buffer's base with *bytes = 0 (a 16-byte cp.async then writes zeros and reads nothing).
__device__ __forceinline__ const void* kv_row(const VerifyParams& p, const RequestExtent& ext,
                                              int64_t j, int64_t source, int* bytes) {
  *bytes = source == -1 ? 0 : 16;
  if (source >= 0) return static_cast<const char*>(p.k_buffer) + source * p.kb_stride * 2;
  if (source == -2) return static_cast<const char*>(p.k_extend) + (ext.qo_start + j - ext.prefix) * p.ke_stride_t * 2;
  return p.k_buffer;
}

// Whether draft row `tok` sees draft column `d` of its request (tree mask or, without one,
// a causal chain). `mask_base`: the request's mask_indptr entry; `length` = prefix + N.
// draft_mask_index: where that entry is in the flat mask.
__device__ __forceinline__ int64_t draft_mask_index(int64_t mask_base, int64_t length, int64_t prefix,
                                                    int64_t tok, int64_t d) {
  int64_t idx = mask_base + tok * length + prefix + d;
#ifdef KDTREE_FAULT_MASK_SHIFT  // negative control: reads the mask one column off
  idx += 1;
#endif
  return idx;
}

__device__ __forceinline__ bool draft_visible(const VerifyParams& p, int64_t mask_base,
                                              int64_t length, int64_t prefix, int64_t tok,
                                              int64_t d) {
  if (!p.mask) return d <= tok;
  const int64_t idx = draft_mask_index(mask_base, length, prefix, tok, d);
  if (idx < 0 || idx >= p.mask_len) {
    flag_error(p, kMaskTooShort);
    return false;
  }
  return p.mask[idx] != 0 && (!p.causal || d <= tok);
}

}  // namespace kdtree
