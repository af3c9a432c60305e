// A split's fp16 partial rows on their way to the workspace (verify_params.h's format), for the
// rows kernel's fp16 build: each thread stages the fp16 values it scaled of a row in shared memory,
// then each warp writes whole rows, so every store fills whole 32-byte sectors (a quad's own
// fp16 pairs would fill half a sector each).
#pragma once
#include <cuda_fp16.h>
#include <cstdint>

#include "../common/row_result.cuh"
#include "../verify_params.h"

namespace kdtree {
namespace wgmma_path {

// A staged partial row (copy_out_staged_row()): kValueDim fp16 values, then its scalars as
// they go to ws_ml (m; l, filled in on the way out; the chunks' exponents; 0), rows
// kStagedRowBytes (1,040) apart, which also spreads a quad's rows over the banks.
constexpr int kStagedRowBytes = kValueDim * 2 + kPartialScalars * 4;

// Row `r` of the staged rows at `staging` (every thread of the calling warp): its values to
// workspace row `flat` in 512-byte warp stores (full lines, where thread-sized stores of two
// fp16 values would each write half a sector) unless it saw nothing (m = -inf), and its
// scalars, with sum `l`, by lane 0.
__device__ __forceinline__ void copy_out_staged_row(const VerifyParams& p, const unsigned char* staging, int r,
                                                    int64_t flat, float l, int lane) {
  const unsigned char* row = staging + r * kStagedRowBytes;
  float4 scalars = *reinterpret_cast<const float4*>(row + kValueDim * 2);
  if (scalars.x != -INFINITY) {
    const uint4 lo = *reinterpret_cast<const uint4*>(row + 16 * lane);
    const uint4 hi = *reinterpret_cast<const uint4*>(row + 512 + 16 * lane);
    unsigned char* dst = static_cast<unsigned char*>(p.ws_acc) + flat * (kValueDim * 2);
    *reinterpret_cast<uint4*>(dst + 16 * lane) = lo;
    *reinterpret_cast<uint4*>(dst + 512 + 16 * lane) = hi;
  }
  scalars.y = l;
  if (lane == 0) *reinterpret_cast<float4*>(p.ws_ml + flat * kPartialScalars) = scalars;
}

}  // namespace wgmma_path
}  // namespace kdtree
