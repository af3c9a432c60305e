// A query row's result once its split's KV range is done, written by every path: with one
// split the output row acc / l in bf16 and its natural-log LSE, else the split's partial
// state for the combine (verify_params.h): acc in fp16, each 128-column chunk scaled by a
// power of two of its own (partial_chunk_exponent()), and (m, l) in log2 units with the
// chunks' exponents (a split that saw nothing writes only (m, l)). Each thread writes its own
// columns of the row, and the exponents of the chunks it is named for.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
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
// ws_acc rows of kValueDim fp16 values and ws_ml rows of kPartialScalars words, [slots, tokens, heads].
__device__ __forceinline__ int64_t partial_row(int64_t split, int64_t tokens, int64_t heads, int64_t tok,
                                               int64_t head) {
  return (split * tokens + tok) * heads + head;
}

// The largest finite |value(i)| over i < kN (0 when there is none): one max per value (fmaxf
// skips NaN); only a thread that met an infinity takes them again without it, so infinities
// do not move the exponent of a chunk's finite values.
template <int kN, class Value>
__device__ __forceinline__ float finite_abs_max(Value value) {
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < kN; ++i) amax = fmaxf(amax, fabsf(value(i)));
  if (amax > 3.402823466e38f) {  // an infinity: the rare path
    amax = 0.f;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const float a = fabsf(value(i));
      amax = a <= 3.402823466e38f ? fmaxf(amax, a) : amax;
    }
  }
  return amax;
}

// The exponent e a 128-column chunk of a partial row is stored at (its values x as fp16 of
// x * 2^-e), from `amax`, the chunk's largest finite |x| (0 <= amax): the chunk's largest
// value lands in [2^14, 2^15), full fp16 precision (11 bits) below fp16's largest finite value,
// whatever the range of V. e lies in [-114, 113] (amax below 2^-100 is taken as 2^-100), so
// 2^-e and 2^e are normal floats and scaling by them is exact.
__device__ __forceinline__ int partial_chunk_exponent(float amax) {
#if defined(KDTREE_FAULT_PARTIAL_UNSCALED)  // negative control: every chunk at one fixed scale
  (void)amax;
  return 0;
#else
  const int log2_floor = static_cast<int>(__float_as_uint(amax) >> 23) - 127;
  return (log2_floor > -100 ? log2_floor : -100) - 14;
#endif
}

// 2^e for e in [-126, 127], exactly.
__device__ __forceinline__ float exp2_int(int e) { return __uint_as_float(static_cast<uint32_t>(e + 127) << 23); }

// Columns d, d + 1 of a partial row (fp16, at `row`), values a, b times 2^-e (`inv_scale`).
__device__ __forceinline__ void store_partial_pair(__half* row, int d, float a, float b, float inv_scale) {
  *reinterpret_cast<__half2*>(row + d) = __floats2half2_rn(a * inv_scale, b * inv_scale);
}

// Row (token `tok` of q, head `head`) of split `split`, with running max `m` (log2 units) and
// sum `l`. store_output(bf16* row, float inv_l) writes this thread's columns of the output
// row scaled by 1 / l; store_partial(__half* row, int8_t* exponents) its columns of the partial
// row (store_partial_pair()) and the exponents (partial_chunk_exponent()) of the chunks it is
// named for. `writes_scalars`: this thread writes the row's LSE or (m, l) (one thread per row).
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
    float* scalars = p.ws_ml + flat * kPartialScalars;
    if (m != -INFINITY)
      store_partial(static_cast<__half*>(p.ws_acc) + flat * kValueDim, reinterpret_cast<int8_t*>(scalars + 2));
    if (writes_scalars) *reinterpret_cast<float2*>(scalars) = make_float2(m, l);
  }
}

}  // namespace kdtree
