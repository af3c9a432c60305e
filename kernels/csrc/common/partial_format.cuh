// Which of the two partial-state formats (verify_params.h) a split call writes and its combine
// reads: split_plan.h's partials_fp16_min_kv() from the call's static sizes, held against the
// batch's prefix positions in device memory (so a captured graph follows each step's lengths).
// The main kernel and the combine read the same kv_indptr entries, so they agree. And the fp16
// format's parts: each 128-column chunk's exponent and its exact powers of two.
#pragma once
#include <cuda_fp16.h>
#include <cstdint>

#include "../split_plan.h"
#include "../verify_params.h"
#include "load_index.cuh"

namespace kdtree {

// Whether this call's partial states are fp16 (else fp32).
__device__ __forceinline__ bool partials_fp16(const VerifyParams& p) {
  const int64_t min_kv = partials_fp16_min_kv(p.path, p.num_splits, p.total_tokens * p.heads);
  if (min_kv == kFp32Always) return false;
  if (min_kv == 0) return true;
  return load_index(p.kv_indptr, p.kv_is_64, p.bs) - load_index(p.kv_indptr, p.kv_is_64, 0) >= min_kv;
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

}  // namespace kdtree
