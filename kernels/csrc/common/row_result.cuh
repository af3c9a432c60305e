// A query row's result once its split's KV range is done, written by every path: with one
// split the output row acc / l in bf16 and its natural-log LSE, else the split's partial
// state for the combine (verify_params.h): (m, l) in log2 units and acc, in fp32
// (write_row_result(): each thread its own columns; a split that saw nothing writes only
// (m, l)) or, in a call that takes fp16 partials (common/partial_format.cuh), in fp16 with
// each 128-column chunk at a power of two of its own (the rows kernel's fp16 build,
// wgmma/row_halves.cuh).
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "../verify_params.h"

namespace kdtree {

// Query row `row` of a request as (draft token, head). Rows are below kMaxDraft x kMaxHeads
// (< 2^32), so a 32-bit division does (a 64-bit one is a long software routine).
__device__ __forceinline__ void row_token_head(int64_t row, int64_t heads, int64_t* tok, int64_t* head) {
  const uint32_t r = static_cast<uint32_t>(row), h = static_cast<uint32_t>(heads);
  const uint32_t t = r / h;
  *tok = t;
  *head = r - t * h;
}

// A row's natural-log LSE from its running max `m` (log2 units) and sum `l`; -inf for a row
// that saw nothing (l = 0).
__device__ __forceinline__ float natural_lse(float m, float l) {
  return l > 0.f ? (m + log2f(l)) * 0.69314718055994531f : -INFINITY;
}

// Where row (token `tok`, head `head`) of workspace slot `split` is in the partial states:
// ws_acc rows of kValueDim values (fp32 or fp16) and ws_ml rows of kPartialScalars words,
// [slots, tokens, heads].
__device__ __forceinline__ int64_t partial_row(int64_t split, int64_t tokens, int64_t heads, int64_t tok,
                                               int64_t head) {
  return (split * tokens + tok) * heads + head;
}

// Row (token `tok` of q, head `head`) of split `split`, with running max `m` (log2 units) and
// sum `l`. store_output(bf16* row, float inv_l) writes this thread's columns of the output
// row scaled by 1 / l; store_partial(float* row) its unscaled columns of the fp32 partial row.
// `writes_scalars`: this thread writes the row's LSE or (m, l) (one thread per row).
template <class StoreOutput, class StorePartial>
__device__ __forceinline__ void write_row_result(const VerifyParams& p, int64_t split, int64_t tok, int64_t head,
                                                 float m, float l, bool writes_scalars, StoreOutput store_output,
                                                 StorePartial store_partial) {
  if (p.num_splits == 1) {
    store_output(static_cast<__nv_bfloat16*>(p.o) + tok * p.o_stride_t + head * p.o_stride_h, l > 0.f ? 1.f / l : 0.f);
    if (p.lse && writes_scalars)
      p.lse[tok * p.lse_stride_t + head] = natural_lse(m, l);
  } else {
    const int64_t flat = partial_row(split, p.total_tokens, p.heads, tok, head);
    if (m != -INFINITY) store_partial(static_cast<float*>(p.ws_acc) + flat * kValueDim);
    if (writes_scalars) *reinterpret_cast<float2*>(p.ws_ml + flat * kPartialScalars) = make_float2(m, l);
  }
}

}  // namespace kdtree
