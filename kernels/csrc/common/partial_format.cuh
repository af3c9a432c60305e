// The parts of the fp16 partial-state format (verify_params.h; which calls take it:
// split_plan.h's partials_fp16()): each 128-column chunk's exponent and its exact powers of two,
// and the flag by which a call of an fp16 build that wrote fp32 tells its combine.
#pragma once
#include <cuda_fp16.h>
#include <cstdint>

#include "../split_plan.h"
#include "../verify_params.h"

namespace kdtree {

// The rows kernel's fp16 build writes fp32 partial states from a one-request call it runs in
// the short layout (split_plan.h: partials_fp16()): every CTA of the call decides alike on
// the device, and the first records the decision in p.layout_flag (1: fp32 values), which a
// one-request call uses for nothing else (common/request_extent.cuh: only a batch's layout
// goes there). Any thread may call it (the first CTA's thread 0 writes); `fp32`: this call
// writes fp32 values.
__device__ __forceinline__ void record_call_format(const VerifyParams& p, bool fp32) {
  if (p.bs == 1 && threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
    *p.layout_flag = fp32 ? 1 : 0;
}

// In the fp16 build of a combine: whether its main kernel wrote fp32 values after all
// (record_call_format()); read after the wait for the main kernel, with the (m, l) loads (a
// load of its own before the partial values' would add a round trip to the combine).
__device__ __forceinline__ bool call_wrote_fp32(const VerifyParams& p) {
#if defined(KDTREE_FAULT_CALL_FORMAT_IGNORED)  // negative control: every value read as fp16
  (void)p;
  return false;
#else
  return p.bs == 1 && *p.layout_flag != 0;
#endif
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
