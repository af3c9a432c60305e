// Programmatic dependent launch (sm_90 and later; verify_api.cu launches every kernel of a
// call this way): a kernel may be launched before the kernel ahead of it in the stream has
// finished, so its launch and CTA setup overlap that kernel's tail, and it waits for the
// earlier grids to finish, and for their writes to be visible, before touching memory.
//
// Where the early launch is allowed (measured on the H200, same-run A/B): the combine
// allows it at its start (the next call's main kernel needs whole SMs, so it lands as the
// combine's CTAs leave). The main kernels never do: their dependent is the combine, whose
// CTAs would then sit waiting on the SMs where the main kernel's CTAs still work (2 us more
// per call at ctx <= 4k); at their exit the combine is launched anyway.
#pragma once

namespace kdtree {

// Blocks until every grid this one depends on has completed and its memory is visible.
// Call before the first global read or write. A no-op after an ordinary launch.
__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel in the stream, if launched as a programmatic dependent, be launched
// now (it still waits for this grid in wait_for_prior_grids()).
__device__ __forceinline__ void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace kdtree
