// One request's extent, read from the indptrs in device memory and clamped so that no
// read ever leaves its tensor; bad lengths set debug flags (both kernel paths).
#pragma once
#include <cstdint>

#include "../split_plan.h"
#include "../verify_params.h"
#include "batch_layout.cuh"
#include "load_index.cuh"
#include "row_result.cuh"

namespace kdtree {

__device__ __forceinline__ void flag_error(const VerifyParams& p, int bit) {
  if (p.debug_checks) atomicOr(p.error_flag, bit);
}

// Asks L2 for the lines holding request b's indptr entries (qo_indptr, kv_indptr and, with
// a mask, mask_indptr), which a main kernel's CTA reads first, in cta_extent() and
// cta_work(). Called before wait_for_prior_grids(): a prefetch reads nothing into the SM
// and L2 is where every SM's accesses meet, so a line fetched before an earlier grid writes
// it is updated by that write and never read stale. -DKDTREE_NO_EARLY_PREFETCH: none (A/B).
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

// Whether a call may run in the batch layout (common/batch_layout.cuh): the plan gave the
// workspace more slots per request than the grid has splits, and the kernel is not one that
// balances its grid instead (static sizes only, split_plan.h). It then does when the batch's
// lengths are uneven (lengths_uneven()); a batch of near-equal lengths keeps the grid's own
// layout, each request in its grid splits, and the combine merges only those slots
// (merged_slot()).
__host__ __device__ __forceinline__ bool has_batch_layout(const VerifyParams& p) {
  return p.base_splits < p.num_splits && !grid_balances(p.path, p.n_max, p.heads, p.bs);
}

// Whether workspace slot `slot` holds a state the combine merges, given the main kernel's
// p.layout_flag value `layout` (read only when has_batch_layout()): every slot, but in a batch
// that kept the grid's own layout only its grid splits.
__device__ __forceinline__ bool merged_slot(const VerifyParams& p, int layout, int64_t slot) {
#ifdef KDTREE_FAULT_GRID_LAYOUT_MERGES_ALL  // negative control: the flag is ignored, stale slots merged
  return slot < p.num_splits;
#endif
  return slot < p.num_splits && (slot < p.base_splits || !has_batch_layout(p) || layout != 0);
}

// A CTA's place in its call's layout: row block, request, split (the workspace slot it writes)
// and the splits its request's KV is cut into in that layout. grid_coord(): the launch grid's
// own layout (row block blockIdx.x, request blockIdx.y, split blockIdx.z of p.base_splits); a
// batch whose workspace has more slots than the grid has splits takes the batch layout
// (enter_batch_layout()), and a kernel may lay a short request out otherwise
// (wgmma/short_layout.cuh).
struct CtaCoord {
  int64_t row_block, request, split, splits;
  bool batch_layout;  // its place in the batch layout: the request's last piece marks the slots past it
};
__device__ __forceinline__ CtaCoord grid_coord(const VerifyParams& p) {
  return {static_cast<int64_t>(blockIdx.x), static_cast<int64_t>(blockIdx.y), static_cast<int64_t>(blockIdx.z),
          p.base_splits, false};
}

// The CTA's place in the batch layout, for chunks of whole `tile`s of at least `min_chunk`
// positions; false when the plan leaves this CTA no piece. Call from every thread, only in a
// call that takes the batch layout (cta_place()).
__device__ __forceinline__ bool enter_batch_layout(const VerifyParams& p, const BatchLengths& lengths, int64_t tile,
                                                   int64_t min_chunk, CtaCoord* c) {
  const int32_t place = batch_layout_place(p.qo_indptr, p.kv_indptr, p.qo_is_64, p.kv_is_64, p.bs, p.n_max,
                                           p.kv_indices_len, lengths.total, lengths.longest, p.num_splits,
                                           p.base_splits, tile, min_chunk);
  if (place < 0) return false;
  *c = {c->row_block, place >> 16, (place >> 8) & 0xff, place & 0xff, true};
  return true;
}

// What the CTA at `c` computes: its request's extent, rows (draft tokens x heads) and KV
// length (prefix + draft tokens), its first row, its split (the workspace slot it writes), its
// split's KV positions [j_begin, j_end) and the request's mask offset.
struct CtaWork {
  RequestExtent ext;
  int64_t rows, row0, length, split, j_begin, j_end, mask_base;
  bool half_idle;  // a short request: the layout's upper half of splits holds none of its KV positions
};

// The extent of the request of the CTA at `c`; the first CTA of each request (row block 0,
// split 0) reports bad lengths. Called by every thread of the CTA; false as request_extent().
__device__ __forceinline__ bool cta_extent(const VerifyParams& p, const CtaCoord& c, RequestExtent* ext) {
  return request_extent(p, c.request, threadIdx.x == 0 && c.row_block == 0 && c.split == 0, ext);
}

// The CTA's place (*c, from grid_coord()) and its request's extent: the grid's own layout,
// or the batch layout where the call takes it (has_batch_layout(), then uneven lengths), which
// the first CTA records in p.layout_flag for the combine. The grid request's extent is read
// before the layout is decided, so both reads are in flight together when the grid's stays.
// False when the batch layout leaves the CTA no piece, or as cta_extent(). Called by every
// thread of the CTA. `kBatchLayout`: the kernel is built with the batch layout; the launch
// takes that build only for calls that may use it (has_batch_layout()), since the plan's code
// alone slows one-request calls, which never run it. A build without it keeps the grid's own
// layout in any call and records that for the combine.
template <bool kBatchLayout>
__device__ __forceinline__ bool cta_place(const VerifyParams& p, int64_t tile, int64_t min_chunk, CtaCoord* c,
                                          RequestExtent* ext) {
  bool inside = cta_extent(p, *c, ext);
  if (has_batch_layout(p)) {
    BatchLengths lengths = {0, 0};
    bool uneven = false;
#if !defined(KDTREE_NO_BATCH_LAYOUT)  // A/B switch: every batch keeps the grid's layout, no lengths read
    if (kBatchLayout) {
      lengths = batch_lengths(p);
      uneven = lengths_uneven(lengths, p.bs);
    }
#endif
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) *p.layout_flag = uneven;
    if (uneven) {
      if (!enter_batch_layout(p, lengths, tile, min_chunk, c)) return false;
      inside = cta_extent(p, *c, ext);
    }
  }
  return inside;
}

// This CTA's work for `block_rows` rows per CTA and the path's split_range() sizes over
// c.splits, its request's splits in the layout, given its request's extent `ext`
// (cta_extent()). In the batch layout the CTA with the request's last piece also marks the
// request's slots past its pieces (mark_slots_empty()). w->half_idle says whether the splits
// from `idle_from` on hold none of the request's positions. Called by every thread of the CTA.
// False when it has nothing to write: its row block lies past the request's rows.
__device__ __forceinline__ bool cta_work(const VerifyParams& p, const CtaCoord& c, const RequestExtent& ext,
                                         int64_t block_rows, int64_t min_chunk, int64_t tile, CtaWork* w,
                                         int64_t idle_from) {
  const int64_t b = c.request, split = c.split;
  w->ext = ext;
  w->rows = ext.qo_len * p.heads;
  w->row0 = c.row_block * block_rows;
  if (w->row0 >= w->rows) return false;
  w->length = ext.prefix + ext.qo_len;
  w->split = split;
  split_range(w->length, c.splits, split, &w->j_begin, &w->j_end, min_chunk, tile);
  w->half_idle = splits_idle_from(w->length, c.splits, idle_from, min_chunk, tile);
#if !defined(KDTREE_FAULT_BATCH_LAYOUT_UNMARKED)  // negative control: the marks are not written
  if (c.batch_layout && split == c.splits - 1 && c.splits < p.num_splits) {
    const int64_t row_end = w->rows < w->row0 + block_rows ? w->rows : w->row0 + block_rows;
    mark_slots_empty(p.ws_ml, p.total_tokens, p.heads, p.num_splits, ext.qo_start, w->row0, row_end, c.splits);
  }
#endif
#ifdef KDTREE_FAULT_DROP_SPLIT  // negative control: the first split never writes its part
  if (p.num_splits > 1 && split == 0) return false;
#endif
  w->mask_base = p.mask ? p.mask_indptr[b] : 0;
  return true;
}

// cta_work() with w->half_idle for the upper half of the request's own splits in the layout.
__device__ __forceinline__ bool cta_work(const VerifyParams& p, const CtaCoord& c, const RequestExtent& ext,
                                         int64_t block_rows, int64_t min_chunk, int64_t tile, CtaWork* w) {
  return cta_work(p, c, ext, block_rows, min_chunk, tile, w, c.splits / 2);
}

// cta_work() in the balanced grid (split_plan.h: grid_balances(), the seesaw kernel): the
// launch grid's own layout over all p.num_splits splits, a batch's request taking
// request_splits() of them. False as cta_work(), or when its tokens lie outside q.
__device__ __forceinline__ bool cta_work_in_balanced_grid(const VerifyParams& p, int64_t block_rows,
                                                          int64_t min_chunk, int64_t tile, CtaWork* w) {
  CtaCoord c = grid_coord(p);
  c.splits = p.num_splits;
  RequestExtent ext;
  if (!cta_extent(p, c, &ext)) return false;
  if (p.base_splits < p.num_splits) {
    const BatchLengths lengths = batch_lengths(p);
    c.splits = request_splits(ext.prefix + ext.qo_len, static_cast<int64_t>(lengths.total), lengths.longest, p.bs,
                              p.base_splits, p.num_splits);
  }
  return cta_work(p, c, ext, block_rows, min_chunk, tile, w, p.num_splits / 2);  // half of the whole grid
}

// cta_work() at the launch grid's own layout, or the batch layout where the call has one,
// reading the request's extent (false also when the batch layout leaves the CTA no piece or
// its tokens lie outside q).
template <bool kBatchLayout = true>
__device__ __forceinline__ bool cta_work(const VerifyParams& p, int64_t block_rows, int64_t min_chunk,
                                         int64_t tile, CtaWork* w) {
  CtaCoord c = grid_coord(p);
  RequestExtent ext;
  if (!cta_place<kBatchLayout>(p, tile, min_chunk, &c, &ext)) return false;
  return cta_work(p, c, ext, block_rows, min_chunk, tile, w);
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
