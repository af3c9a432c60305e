// The 64-row wgmma kernels' rows per thread (verify_kernel_rows.cuh, verify_kernel_seesaw.cuh):
// each thread of the two computing warpgroups holds two of the CTA's 64 rows (row_tokens(),
// fragment_row_half(); their visible scores: row_visible_bits()) and, for them, half of O's
// value dims and its own share of each row's sum l. At the end the row sums meet in shared
// memory, then every real row's result is written (common/row_result.cuh): the output row with
// one split or the fp32 partial state, each thread its own elements; the fp16 partial state
// staged and written by whole rows (staged_rows.cuh; write_row_halves()).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

#include "../common/partial_format.cuh"
#include "../common/request_extent.cuh"
#include "../common/row_result.cuh"
#include "../verify_params.h"
#include "staged_rows.cuh"

namespace kdtree {
namespace wgmma_path {

// Which of a thread's two rows (0: the CTA's row 16 warp + g, 1: that row + 8) element i of an
// m64 MMA fragment (scores or accumulators) belongs to: elements 4k + 2h and 4k + 2h + 1 are
// row h's.
__host__ __device__ constexpr int fragment_row_half(int i) { return (i >> 1) & 1; }

// The bits of a fragment of `kElems` elements that lie in row half `h`.
template <int kElems>
__host__ __device__ constexpr uint32_t fragment_row_mask(int h) {
  uint32_t bits = 0;
  for (int i = 0; i < kElems; ++i)
    if (fragment_row_half(i) == h) bits |= 1u << i;
  return bits;
}

// The draft tokens tok_of[h] (-1: padding, past the request's `rows`) of this thread's two
// rows, request rows row_lo and row_lo + 8 (row_lo = the CTA's first row + 16 warp + g).
// Returns the bits of a fragment of `kElems` elements that belong to real rows.
template <int kElems>
__device__ __forceinline__ uint32_t row_tokens(int64_t row_lo, int64_t rows, int64_t heads, int* tok_of) {
  static_assert(kElems == 16 || kElems == 32, "a 32- or 64-position tile of scores");
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int64_t tok = -1, head;
    if (row_lo + 8 * h < rows) row_token_head(row_lo + 8 * h, heads, &tok, &head);
    tok_of[h] = static_cast<int>(tok);
  }
  return (tok_of[0] >= 0 ? fragment_row_mask<kElems>(0) : 0u) | (tok_of[1] >= 0 ? fragment_row_mask<kElems>(1) : 0u);
}

// Visibility of this thread's `kElems` score elements in a tile that is not all prefix: bit i
// for s[i] = row tok_of[fragment_row_half(i)] at position j_first + 8 (i / 4) + i % 2; a
// token < 0 is a padding row (nothing visible). Draft columns are read from the staged bits
// (kv_staging.cuh: stage_draft_visibility). A rolled loop: only boundary tiles come here, and
// it keeps the scores in registers.
template <int kElems>
__device__ __forceinline__ uint32_t row_visible_bits(const uint32_t* draft_vis, int64_t prefix, int64_t j_first,
                                                     int64_t j_end, int tok_lo, int tok_hi) {
  static_assert(kElems <= 32, "one bit per element in 32 bits");
  uint32_t bits = 0;
#pragma unroll 1
  for (int i = 0; i < kElems; ++i) {
    const int tok = fragment_row_half(i) ? tok_hi : tok_lo;
    const int64_t j = j_first + 8 * (i / 4) + (i & 1);
    if (tok < 0 || j >= j_end) continue;
    const int64_t d = j - prefix;
    if (d < 0 || ((draft_vis[tok * 2 + (d >> 5)] >> (d & 31)) & 1u)) bits |= 1u << i;
  }
  return bits;
}

// Thread (warpgroup wg, quad lane t) of the two computing warpgroups (threads 0-255 of the
// CTA), whose rows are qrow[h] = 16 warp + g + 8 h of the CTA (request rows row0 + qrow[h];
// past row_end, tok_of[h] < 0: padding), with running max m_run[h], partial sum l_run[h] and
// acc[4 k + 2 h + e] = O[row h][dim 256 wg + 8 k + 2 t + e]: its warpgroup holds chunks 2 wg
// and 2 wg + 1 of a partial row (k < 16, k >= 16). `row_sum`: [2][64] floats of shared memory;
// `staging`: 64 x kStagedRowBytes of shared memory that no MMA reads once every thread is past
// its loop (Q); `sync()` must synchronise both warpgroups. `split`: the CTA's split;
// kFp16Build: the kernel's build writes fp16 partial states (split_plan.h: partials_fp16());
// `fp16`: this call does (false: fp32 all the same, short_layout.cuh). With one split, or fp32
// partials, each thread writes its own columns; fp16 partial rows are staged and each warp
// writes whole rows (copy_out_staged_row()).
template <bool kFp16Build, class Sync>
__device__ __forceinline__ void write_row_halves(const VerifyParams& p, int64_t split, int64_t row0, int64_t row_end,
                                                 int64_t qo_start, const int* tok_of, const int* qrow,
                                                 const float* m_run, float* l_run, const float* acc, float* row_sum,
                                                 unsigned char* staging, bool fp16, int wg, int t, Sync sync) {
  constexpr int kRows = 64, kHalfDims = kValueDim / 2;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    if (t == 0) row_sum[wg * kRows + qrow[h]] = l_run[h];
  }
  const int d0 = kHalfDims * wg + 2 * t;  // this thread's columns: d0 + 8 k, + 1
  if (!kFp16Build || !fp16) {
    (void)row_end;
    (void)staging;
    sync();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (tok_of[h] < 0) continue;
      int64_t tk, head;
      row_token_head(row0 + qrow[h], p.heads, &tk, &head);
      tk += qo_start;
      const float l = row_sum[qrow[h]] + row_sum[kRows + qrow[h]];
      write_row_result(
          p, split, tk, head, m_run[h], l, wg == 0 && t == 0,
          [&](__nv_bfloat16* dst, float inv) {
            __nv_bfloat16* out = dst + d0;
#pragma unroll
            for (int k = 0; k < kHalfDims / 8; ++k)
              *reinterpret_cast<__nv_bfloat162*>(out + 8 * k) =
                  __floats2bfloat162_rn(acc[4 * k + 2 * h] * inv, acc[4 * k + 2 * h + 1] * inv);
          },
          [&](float* dst) {
            float* ws = dst + d0;
#pragma unroll
            for (int k = 0; k < kHalfDims / 8; ++k)
              *reinterpret_cast<float2*>(ws + 8 * k) = make_float2(acc[4 * k + 2 * h], acc[4 * k + 2 * h + 1]);
          });
    }
  } else {
    int exponent[2][2];  // [row h][chunk 2 wg + q]: over the quad's columns (every lane of the warp)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        float amax = finite_abs_max<32>([&](int i) { return acc[4 * (16 * q + i / 2) + 2 * h + i % 2]; });
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        exponent[h][q] = partial_chunk_exponent(amax);
      }
    sync();  // every thread past its loop (staging is free); both halves' row sums in row_sum
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (tok_of[h] < 0) continue;
      unsigned char* row = staging + qrow[h] * kStagedRowBytes;
      const float inv_scale[2] = {exp2_int(-exponent[h][0]), exp2_int(-exponent[h][1])};
#pragma unroll
      for (int k = 0; k < kHalfDims / 8; ++k)
        store_partial_pair(reinterpret_cast<__half*>(row), d0 + 8 * k, acc[4 * k + 2 * h], acc[4 * k + 2 * h + 1],
                           inv_scale[k / 16]);
      if (t == 0) {
        *reinterpret_cast<uint16_t*>(row + kValueDim * 2 + 8 + 2 * wg) =
            static_cast<uint16_t>((exponent[h][0] & 0xff) | ((exponent[h][1] & 0xff) << 8));
        if (wg == 0) {
          *reinterpret_cast<float2*>(row + kValueDim * 2) = make_float2(m_run[h], 0.f);
          *reinterpret_cast<uint32_t*>(row + kValueDim * 2 + 12) = 0u;
        }
      }
    }
    sync();  // every staged row complete
    const int warp8 = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll 1
    for (int r = warp8; r < kRows && row0 + r < row_end; r += 8) {
      int64_t tk, head;
      row_token_head(row0 + r, p.heads, &tk, &head);
      copy_out_staged_row(p, staging, r, partial_row(split, p.total_tokens, p.heads, qo_start + tk, head),
                          row_sum[r] + row_sum[kRows + r], lane);
    }
  }
}

}  // namespace wgmma_path
}  // namespace kdtree
