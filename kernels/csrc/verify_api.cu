// The C ABI the Python side loads with ctypes: plan, launch (main kernel, then the
// combine when KV is split), all on the caller's stream. No allocation, no host read of
// per-step data, grid from static sizes only: safe to capture in a CUDA graph.
#include <cuda_runtime.h>

#include "combine.cuh"
#include "mma_sync/verify_kernel.cuh"
#include "split_plan.h"
#include "verify_params.h"

using kdtree::VerifyParams;

extern "C" {

// Splits for these static sizes (the workspace the caller must provide follows from it).
int64_t kdtree_num_splits(int64_t bs, int64_t heads, int64_t n_max, int64_t num_sms,
                          int64_t workspace_budget_bytes) {
  int64_t row_blocks = kdtree::ceil_div(n_max * heads, kdtree::kBlockM);
  return kdtree::choose_num_splits(bs, row_blocks, bs * n_max * heads, num_sms,
                                   workspace_budget_bytes);
}

int64_t kdtree_row_blocks(int64_t heads, int64_t n_max) {
  return kdtree::ceil_div(n_max * heads, kdtree::kBlockM);
}

// Launch part of a call: 0 = all of it (main kernel, then the combine when KV is split),
// 1 = the main kernel only, 2 = the combine only (benchmarks time the combine's share with
// 1 and 2). Returns a cudaError_t value (0 on success).
int kdtree_verify_launch_part(const VerifyParams* params, void* stream_handle, int part) {
  if (part < 0 || part > 2) return static_cast<int>(cudaErrorInvalidValue);
  static bool configured = false;  // one-time: allow > 48 KiB dynamic shared memory
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(kdtree::verify_mma_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         kdtree::kSmemBytes);
    if (e != cudaSuccess) return static_cast<int>(e);
    configured = true;
  }
  const VerifyParams& p = *params;
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  dim3 grid(static_cast<unsigned>(p.row_blocks), static_cast<unsigned>(p.bs),
            static_cast<unsigned>(p.num_splits));
  if (part != 2)
    kdtree::verify_mma_kernel<<<grid, kdtree::kThreads, kdtree::kSmemBytes, stream>>>(p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || p.num_splits == 1 || part == 1) return static_cast<int>(e);
  int64_t rows = p.total_tokens * p.heads;
  unsigned blocks = static_cast<unsigned>(kdtree::ceil_div(rows, kdtree::kCombineWarps));
  if (blocks > 0)
    kdtree::verify_combine_kernel<<<blocks, kdtree::kCombineWarps * 32, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

// Launch a whole call. Returns a cudaError_t value (0 on success).
int kdtree_verify_launch(const VerifyParams* params, void* stream_handle) {
  return kdtree_verify_launch_part(params, stream_handle, 0);
}

const char* kdtree_error_string(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

}  // extern "C"
