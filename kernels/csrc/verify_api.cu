// The C ABI the Python side loads with ctypes: plan (kernel path and splits from static
// sizes), launch (main kernel, then the combine when KV is split), all on the caller's
// stream. No allocation, no host read of per-step data, grid from static sizes only:
// safe to capture in a CUDA graph. Both kernels are launched as programmatic dependents
// (common/grid_dependency.cuh): each may be launched while the kernel before it in the
// stream runs, and waits for it before touching memory (build with
// -DKDTREE_SERIAL_LAUNCH for ordinary launches, to measure what that saves).
#include <cuda_runtime.h>

#include "combine.cuh"
#include "mma_sync/verify_kernel.cuh"
#include "split_plan.h"
#include "switches.h"  // the -D switches these sources read (none in the shipped build)
#include "tiled/verify_kernel.cuh"
#include "verify_params.h"
#include "wgmma/verify_kernel.cuh"
#include "wgmma/verify_kernel_rows.cuh"
#include "wgmma/verify_kernel_seesaw.cuh"

using kdtree::VerifyParams;

namespace {

// Allow > 48 KiB of dynamic shared memory for `kernel` on the current device (once per
// device and kernel).
template <typename Kernel>
cudaError_t allow_shared_memory(Kernel kernel, int bytes, unsigned long long* configured) {
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  unsigned long long bit = 1ull << (device & 63);
  if (*configured & bit) return cudaSuccess;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) *configured |= bit;
  return e;
}

// Launch `kernel(p)` on `stream`, allowed to start before the kernel ahead of it finishes
// (every kernel here waits for its predecessors before touching memory).
template <typename Kernel>
cudaError_t launch_dependent(Kernel kernel, dim3 grid, dim3 block, int smem, cudaStream_t stream,
                             const VerifyParams& p) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
#if defined(KDTREE_SERIAL_LAUNCH)
  config.numAttrs = 0;
#else
  config.attrs = attribute;
  config.numAttrs = 1;
#endif
  return cudaLaunchKernelEx(&config, kernel, p);
}

// Launch main kernel `Kernel` (`Threads` threads, `Smem` bytes of dynamic shared memory) on
// the grid (row blocks, requests, the grid's splits per request).
template <auto Kernel, int Threads, int Smem>
cudaError_t launch_main(const VerifyParams& p, cudaStream_t stream) {
  static unsigned long long configured = 0;  // one flag per kernel: devices already allowed Smem
  cudaError_t e = allow_shared_memory(Kernel, Smem, &configured);
  if (e != cudaSuccess) return e;
  const bool balanced = kdtree::grid_balances(p.path, p.n_max, p.heads, p.bs);  // its grid: all the slots
  dim3 grid(static_cast<unsigned>(p.row_blocks), static_cast<unsigned>(p.bs),
            static_cast<unsigned>(balanced ? p.num_splits : p.base_splits));
  return launch_dependent(Kernel, grid, dim3(Threads), Smem, stream, p);
}

// Launch the build of a wgmma main kernel with the batch layout's code (`WithLayout`) for a call
// that may take that layout (has_batch_layout()), else the build without it (`WithoutLayout`):
// its code alone slows the calls that never run it (common/request_extent.cuh: cta_place()).
template <auto WithLayout, auto WithoutLayout, int Threads, int Smem>
cudaError_t launch_main_for_layout(const VerifyParams& p, cudaStream_t stream) {
  return kdtree::has_batch_layout(p) ? launch_main<WithLayout, Threads, Smem>(p, stream)
                                     : launch_main<WithoutLayout, Threads, Smem>(p, stream);
}

// Launch the combine kernel `c` names, built for the main kernel's partial states `Partials`
// (split_plan.h: PartialBuild).
template <int Partials>
cudaError_t launch_combine(const kdtree::CombineLaunch& c, dim3 grid, dim3 block, cudaStream_t stream,
                           const VerifyParams& p) {
  return c.by_rows ? launch_dependent(kdtree::verify_combine_rows_kernel<Partials>, grid, block, 0, stream, p)
         : c.ctas_per_sm == 4
         ? launch_dependent(kdtree::verify_combine_kernel<4, Partials>, grid, block, 0, stream, p)
         : launch_dependent(kdtree::verify_combine_kernel<8, Partials>, grid, block, 0, stream, p);
}

}  // namespace

extern "C" {

// Shared memory (bytes) a path needs per CTA.
int64_t kdtree_path_smem(int64_t path) {
  switch (path) {
    case kdtree::kPathPortable: return kdtree::kSmemBytes;
    case kdtree::kPathTiled32: return kdtree::tiled::Tile<32>::kSmemBytes;
    case kdtree::kPathTiled64: return kdtree::tiled::Tile<64>::kSmemBytes;
    case kdtree::kPathWgmma16: return kdtree::wgmma_path::Shape<16, 2, 1>::kSmemBytes;
    case kdtree::kPathWgmma32: return kdtree::wgmma_path::Shape<16, 2, 2>::kSmemBytes;
    case kdtree::kPathWgmma64:  // either kernel (split_plan.h: runs_seesaw)
      return kdtree::wgmma_rows::kSmemBytes > kdtree::wgmma_seesaw::kSmemBytes ? kdtree::wgmma_rows::kSmemBytes
                                                                               : kdtree::wgmma_seesaw::kSmemBytes;
    default: return -1;
  }
}

// The compute capability (major * 10 + minor) of the code the current device runs from this
// library: the target of its machine code (90 on sm_90a, 120 on sm_120a), or 80 where the
// driver compiled the compute_80 PTX (any other GPU from sm_80 on); minus the CUDA error code
// when the device runs none of it (cudaFuncGetAttributes failed: kdtree_error_string() names it).
int kdtree_code_arch(void) {
  cudaFuncAttributes attributes = {};
  const cudaError_t e = cudaFuncGetAttributes(&attributes, kdtree::verify_mma_kernel);
  if (e != cudaSuccess) {
    cudaGetLastError();  // leave no sticky error for the caller's next CUDA call
    return -static_cast<int>(e);
  }
  return attributes.ptxVersion;
}

// Plan a call from static sizes. `request`: -1 = the fastest path this device can run,
// 0 = portable, 1 = tiled, 2 = wgmma. `smem_optin`: the device's opt-in shared memory per
// block; `capability`: major * 10 + minor of the code the device runs (kdtree_code_arch():
// wgmma runs on 9.0 only, tiled on 9.0 and 12.0, portable on all). Writes {path,
// num_splits (the workspace slots per request, which the combine merges), row_blocks,
// base_splits (the splits per request of an equal-length batch; fewer than num_splits in a
// batch, which then takes the batch layout or the balanced grid, split_plan.h)} to `out`; returns 0, or 1 when the requested path
// does not fit this device, 2 on a bad argument. Build with -DKDTREE_NO_BALANCE for plans
// without either (to measure what they do).
int kdtree_plan(int64_t bs, int64_t heads, int64_t n_max, int64_t num_sms, int64_t smem_optin,
                int64_t capability, int64_t workspace_budget_bytes, int64_t request, int64_t* out) {
  if (bs < 1 || heads < 1 || heads > kdtree::kMaxHeads || n_max < 1 || n_max > kdtree::kMaxDraft || num_sms < 1 || request < -1 ||
      request > 2)
    return 2;
  const int64_t rows = n_max * heads;
  const int64_t tiled = rows > 32 ? kdtree::kPathTiled64 : kdtree::kPathTiled32;
  // wgmma: 64-row CTAs past 32 rows (from the seesaw threshold the launch runs the seesaw
  // kernel, split_plan.h: runs_seesaw); at 16 or 32 rows the transposed kernel, which pads
  // nothing (the rows kernel would pad them to 64)
  const int64_t wgmma = rows > 32 ? kdtree::kPathWgmma64
                        : rows > 16 ? kdtree::kPathWgmma32 : kdtree::kPathWgmma16;
  // tiled and wgmma run only from the library's machine code (sm_90a, sm_120a); a device that
  // runs the compute_80 PTX through the driver (capability 80 from kdtree_code_arch()) gets
  // the portable path
  const bool native = capability == 90 || capability == 120;
  const bool tiled_fits = native && kdtree_path_smem(tiled) <= smem_optin;
  const bool wgmma_fits = capability == 90 && kdtree_path_smem(wgmma) <= smem_optin;
  if ((request == 1 && !tiled_fits) || (request == 2 && !wgmma_fits)) return 1;
  // auto: wgmma where it runs, else tiled where its shared memory fits, else portable
  int64_t path = kdtree::kPathPortable;
  if (request == 2 || (request == -1 && wgmma_fits)) path = wgmma;
  else if (request != 0 && tiled_fits) path = tiled;
  const int64_t row_blocks = kdtree::ceil_div(rows, path == kdtree::kPathPortable ? kdtree::kBlockM
                                                                                  : kdtree::path_block_m(path));
  const int64_t splits = path == kdtree::kPathPortable
      ? kdtree::choose_num_splits(bs, row_blocks, bs * rows, num_sms, workspace_budget_bytes)
      : kdtree::choose_num_splits_tiled(bs, row_blocks, bs * rows, num_sms, workspace_budget_bytes);
  // workspace slots per request: more than the grid's splits give the batch layout, or the
  // balanced grid (split_plan.h)
  int64_t slots = splits;
#if !defined(KDTREE_NO_BALANCE)
  const bool balanced = kdtree::grid_balances(path, n_max, heads, bs);
  const int64_t factor = balanced ? kdtree::kBalanceFactor : kdtree::kBatchSlotsFactor;
  if (path != kdtree::kPathPortable && bs > 1 && splits >= 2 && (!balanced || splits <= kdtree::kBalanceMaxBase) &&
      splits * factor <= kdtree::kMaxSplitsTiled && splits * factor * bs * rows * kdtree::kPartialRowBytes <= workspace_budget_bytes)
    slots = splits * factor;
#endif
  out[0] = path;
  out[1] = slots;
  out[2] = row_blocks;
  out[3] = splits;
  return 0;
}

// Whether a call of KernelPath `path` and these sizes balances a batch in its grid (the seesaw
// kernel) rather than in the batch layout (split_plan.h): 1 or 0.
int kdtree_grid_balances(int64_t path, int64_t n_max, int64_t heads, int64_t bs) {
  return kdtree::grid_balances(path, n_max, heads, bs) ? 1 : 0;
}

// Whether a batch of `bs` requests whose lengths (prefix + draft tokens, clamped as the kernels
// count them) sum to `total`, the longest `longest`, is uneven enough for the batch layout
// (common/batch_layout.cuh: lengths_uneven()): 1 or 0; 2 on a bad argument.
int kdtree_lengths_uneven(int64_t total, int64_t longest, int64_t bs) {
  if (bs < 1 || longest < 0 || longest > UINT32_MAX || total < longest) return 2;
  const kdtree::BatchLengths lengths = {static_cast<uint64_t>(total), static_cast<uint32_t>(longest)};
  return kdtree::lengths_uneven(lengths, bs) ? 1 : 0;
}

// The combine's launch for `rows` query rows (T x H) and `num_splits` grid splits per request
// (the plan's base_splits; a batch's combine merges up to kBatchSlotsFactor times as many
// workspace slots with the same warps) on `num_sms` SMs: writes {warps per query row (1: the row kernel), CTAs, CTAs per SM it is built for} to
// `out`; returns 0, or 2 on a bad argument.
int kdtree_combine_shape(int64_t rows, int64_t num_splits, int64_t num_sms, int64_t* out) {
  if (rows < 1 || num_splits < 2 || num_splits > kdtree::kMaxSplitsTiled || num_sms < 1) return 2;
  const kdtree::CombineLaunch c = kdtree::combine_launch(rows, num_splits, num_sms);
  out[0] = c.warps_per_row;
  out[1] = c.ctas;
  out[2] = c.ctas_per_sm;
  return 0;
}

// The workspace of a split call per query row and slot (verify_params.h): writes {bytes of
// partial values (ws_acc; fp32, the larger format), 32-bit scalars (ws_ml)} to `out`.
void kdtree_partial_layout(int64_t* out) {
  out[0] = kdtree::kValueDim * 4;
  out[1] = kdtree::kPartialScalars;
}

// Whether a split call of KernelPath `path`, `n_max` draft tokens, `heads` heads, `bs` requests,
// `num_splits` workspace slots and `rows` query rows (T x H) launches a build that writes fp16
// partial states (split_plan.h: partials_fp16(), static sizes only; the build for calls that
// may take the short layout writes fp32 in it, partial_build()): 1 or 0; -1 on a bad argument.
int kdtree_partials_fp16(int64_t path, int64_t n_max, int64_t heads, int64_t bs, int64_t num_splits, int64_t rows) {
  if (path < kdtree::kPathPortable || path > kdtree::kPathWgmma64 || n_max < 1 || n_max > kdtree::kMaxDraft ||
      heads < 1 || heads > kdtree::kMaxHeads || bs < 1 || num_splits < 1 || num_splits > kdtree::kMaxSplitsTiled ||
      rows < 1)
    return -1;
  return kdtree::partials_fp16(path, n_max, heads, bs, num_splits, rows) ? 1 : 0;
}

// Launch part of a call: 0 = all of it (main kernel, then the combine when KV is split),
// 1 = the main kernel only, 2 = the combine only (benchmarks time the combine's share with
// 1 and 2). Returns a cudaError_t value (0 on success).
int kdtree_verify_launch_part(const VerifyParams* params, void* stream_handle, int part) {
  if (part < 0 || part > 2) return static_cast<int>(cudaErrorInvalidValue);
  const VerifyParams& p = *params;
  if (p.n_max < 1 || p.n_max > kdtree::kMaxDraft || p.heads < 1 || p.heads > kdtree::kMaxHeads ||
      p.base_splits < 1 || p.base_splits > p.num_splits || p.num_splits > kdtree::kMaxSplitsTiled ||
      (p.bs == 1 && p.num_splits != p.base_splits) ||
      p.num_splits > (kdtree::grid_balances(p.path, p.n_max, p.heads, p.bs) ? kdtree::kBalanceFactor
                                                                            : kdtree::kBatchSlotsFactor) * p.base_splits)
    return static_cast<int>(cudaErrorInvalidValue);
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  cudaError_t e = cudaSuccess;
  if (part != 2) {
    namespace tl = kdtree::tiled;
    namespace wg = kdtree::wgmma_path;
    namespace wr = kdtree::wgmma_rows;
    namespace ws = kdtree::wgmma_seesaw;
    using W16 = wg::Shape<16, 2, 1>;
    using W32 = wg::Shape<16, 2, 2>;
    switch (p.path) {
      case kdtree::kPathPortable:
        e = launch_main<kdtree::verify_mma_kernel, kdtree::kThreads, kdtree::kSmemBytes>(p, stream);
        break;
      case kdtree::kPathTiled32:
        e = launch_main<tl::verify_tiled_kernel<32>, tl::kThreads, tl::Tile<32>::kSmemBytes>(p, stream);
        break;
      case kdtree::kPathTiled64:
        e = launch_main<tl::verify_tiled_kernel<64>, tl::kThreads, tl::Tile<64>::kSmemBytes>(p, stream);
        break;
      case kdtree::kPathWgmma16:
        e = launch_main_for_layout<wg::verify_wgmma_kernel<16, 2, 1, true>, wg::verify_wgmma_kernel<16, 2, 1, false>,
                                   W16::kThreads, W16::kSmemBytes>(p, stream);
        break;
      case kdtree::kPathWgmma32:
        e = launch_main_for_layout<wg::verify_wgmma_kernel<16, 2, 2, true>, wg::verify_wgmma_kernel<16, 2, 2, false>,
                                   W32::kThreads, W32::kSmemBytes>(p, stream);
        break;
      case kdtree::kPathWgmma64:  // the seesaw kernel from its threshold (runs_seesaw: static sizes only),
        // else the rows kernel's build for the call's partial states (split_plan.h: partial_build)
        if (kdtree::runs_seesaw(p.n_max, p.heads, p.bs)) {
          e = launch_main<ws::verify_seesaw_kernel, ws::kThreads, ws::kSmemBytes>(p, stream);
          break;
        }
        switch (kdtree::partial_build(p.path, p.n_max, p.heads, p.bs, p.row_blocks, p.num_splits,
                                      p.total_tokens * p.heads)) {
          case kdtree::kPartialsFp16ShortFp32:  // one request in one row block (bs 1): neither the batch
                                                // layout nor the copier
            e = launch_main<wr::verify_rows_kernel<false, kdtree::kPartialsFp16ShortFp32, false>,
                            wr::kThreadsOf<false>, wr::kSmemBytes>(p, stream);
            break;
          case kdtree::kPartialsFp16:
            e = kdtree::rows_copier(p.bs, p.row_blocks)  // one request (bs 1): never the batch layout
                    ? launch_main<wr::verify_rows_kernel<false, kdtree::kPartialsFp16, true>, wr::kThreadsOf<true>,
                                  wr::kSmemBytes>(p, stream)
                    : launch_main_for_layout<wr::verify_rows_kernel<true, kdtree::kPartialsFp16, false>,
                                             wr::verify_rows_kernel<false, kdtree::kPartialsFp16, false>,
                                             wr::kThreadsOf<false>, wr::kSmemBytes>(p, stream);
            break;
          default:
            e = kdtree::rows_copier(p.bs, p.row_blocks)
                    ? launch_main<wr::verify_rows_kernel<false, kdtree::kPartialsFp32, true>, wr::kThreadsOf<true>,
                                  wr::kSmemBytes>(p, stream)
                    : launch_main_for_layout<wr::verify_rows_kernel<true, kdtree::kPartialsFp32, false>,
                                             wr::verify_rows_kernel<false, kdtree::kPartialsFp32, false>,
                                             wr::kThreadsOf<false>, wr::kSmemBytes>(p, stream);
        }
        break;
      default: return static_cast<int>(cudaErrorInvalidValue);
    }
  }
  if (e != cudaSuccess || p.num_splits == 1 || part == 1) return static_cast<int>(e);
  const int64_t rows = p.total_tokens * p.heads;
  if (rows > 0) {
    int device = 0, sms = 0;
    if ((e = cudaGetDevice(&device)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
      return static_cast<int>(e);
    const kdtree::CombineLaunch c = kdtree::combine_launch(rows, p.base_splits, sms);
    const dim3 grid(static_cast<unsigned>(c.ctas)), block(kdtree::kCombineWarps * 32);
    switch (kdtree::partial_build(p.path, p.n_max, p.heads, p.bs, p.row_blocks, p.num_splits, rows)) {
      case kdtree::kPartialsFp16ShortFp32:  // the main kernel's build
        e = launch_combine<kdtree::kPartialsFp16ShortFp32>(c, grid, block, stream, p);
        break;
      case kdtree::kPartialsFp16:
        e = launch_combine<kdtree::kPartialsFp16>(c, grid, block, stream, p);
        break;
      default:
        e = launch_combine<kdtree::kPartialsFp32>(c, grid, block, stream, p);
    }
  }
  return static_cast<int>(e);
}

// Launch a whole call. Returns a cudaError_t value (0 on success).
int kdtree_verify_launch(const VerifyParams* params, void* stream_handle) {
  return kdtree_verify_launch_part(params, stream_handle, 0);
}

const char* kdtree_error_string(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

}  // extern "C"
