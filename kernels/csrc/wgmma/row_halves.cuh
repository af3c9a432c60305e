// The 64-row wgmma kernels' rows per thread (verify_kernel_rows.cuh, verify_kernel_seesaw.cuh):
// each thread of the two computing warpgroups holds two of the CTA's 64 rows (row_tokens())
// and, for them, half of O's value dims and its own share of each row's sum l. At the end the
// row sums meet in shared memory, then every real row's result is written
// (common/row_result.cuh): the output row with one split, else the split's partial state,
// each thread its own elements (write_row_halves()).
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "../common/request_extent.cuh"
#include "../common/row_result.cuh"
#include "../verify_params.h"

namespace kdtree {
namespace wgmma_path {

// The draft tokens tok_of[h] (-1: padding, past the request's `rows`) of this thread's two
// rows, request rows row_lo and row_lo + 8 (row_lo = the CTA's first row + 16 warp + g; MMA
// fragment rows: elements 4k + 2h, 4k + 2h + 1 of an accumulator). Returns the bits of a
// fragment of `kElems` elements that belong to real rows.
template <int kElems>
__device__ __forceinline__ uint32_t row_tokens(int64_t row_lo, int64_t rows, int64_t heads, int* tok_of) {
  static_assert(kElems == 16 || kElems == 32, "a 32- or 64-position tile of scores");
  constexpr uint32_t kLo = kElems == 16 ? 0x3333u : 0x33333333u;  // elements of row h = 0
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int64_t tok = -1, head;
    if (row_lo + 8 * h < rows) row_token_head(row_lo + 8 * h, heads, &tok, &head);
    tok_of[h] = static_cast<int>(tok);
  }
  return (tok_of[0] >= 0 ? kLo : 0u) | (tok_of[1] >= 0 ? kLo << 2 : 0u);
}

// Thread (warpgroup wg, quad lane t) of the two computing warpgroups, whose rows are
// qrow[h] = 16 warp + g + 8 h of the CTA (request rows row0 + qrow[h]; tok_of[h] < 0:
// padding), with running max m_run[h], partial sum l_run[h] and acc[4 k + 2 h + e] =
// O[row h][dim 256 wg + 8 k + 2 t + e]. `row_sum`: [2][64] floats of shared memory; `sync()`
// must synchronise both warpgroups. `split`: the CTA's split.
template <class Sync>
__device__ __forceinline__ void write_row_halves(const VerifyParams& p, int64_t split, int64_t row0, int64_t qo_start,
                                                 const int* tok_of, const int* qrow, const float* m_run, float* l_run,
                                                 const float* acc, float* row_sum, int wg, int t, Sync sync) {
  constexpr int kRows = 64, kHalfDims = kValueDim / 2;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    if (t == 0) row_sum[wg * kRows + qrow[h]] = l_run[h];
  }
  sync();
  const int d0 = kHalfDims * wg + 2 * t;  // this thread's columns: d0 + 8 k, + 1
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (tok_of[h] < 0) continue;
    int64_t tk, head;
    row_token_head(row0 + qrow[h], p.heads, &tk, &head);
    tk += qo_start;
    const float l = row_sum[qrow[h]] + row_sum[kRows + qrow[h]], m = m_run[h];
    write_row_result(
        p, split, tk, head, m, l, wg == 0 && t == 0,
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
}

}  // namespace wgmma_path
}  // namespace kdtree
