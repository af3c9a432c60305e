// Programmatic dependent launch (sm_90 and later; verify_api.cu launches every kernel of a
// call this way): a kernel may be launched before the kernel ahead of it in the stream has
// finished, so its launch and CTA setup overlap that kernel's tail, and it waits for the
// earlier grids to finish, and for their writes to be visible, before touching memory.
//
// Where the early launch is allowed (docs/perf.md has the A/B figures): the combine
// allows it at its start (the next call's main kernel needs whole SMs, so it lands as the
// combine's CTAs leave). The main kernels never allow it at their start: their dependent is
// the combine, whose CTAs would then sit waiting on the SMs where the main kernel's CTAs still
// work. The wgmma main kernels allow it once their KV loop
// is done, before the epilogue writes the result, when the request is short enough to leave
// at least half of the grid's splits without work (allow_dependents_at_epilogue): the
// combine's launch then overlaps the tail of the grid on SMs that had nothing to do. When
// (nearly) every SM has work, early-launched combine CTAs crowd onto the SMs that finish
// first, so the combine is left to
// launch at their exit.
// -DKDTREE_MAIN_NO_TRIGGER never allows it early, for A/B.
#pragma once

// The wait as an instruction for inline asm that issues it together with other instructions
// (combine.cuh): empty below sm_90, which has no programmatic dependent launch.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define KDTREE_GRID_WAIT_ASM ""
#else
#define KDTREE_GRID_WAIT_ASM "griddepcontrol.wait;\n\t"
#endif

namespace kdtree {

// Blocks until every grid this one depends on has completed and its memory is visible.
// Call before the first global write and before reading anything an earlier grid writes.
// The main kernels call it before any global access. The combines read one input before it
// (qo_indptr: combine.cuh, TokenOwner): a combine launches only once every CTA of its main
// kernel has passed this wait (no main kernel allows its dependents earlier), so the grids
// that wrote the call's inputs are complete by then. A no-op after an ordinary launch.
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

// A main kernel's CTA whose KV loop is done: its dependent (the combine) may be launched
// when `half_idle` (cta_work(): at least half of the grid's splits have none of its KV).
__device__ __forceinline__ void allow_dependents_at_epilogue(bool half_idle) {
#if !defined(KDTREE_MAIN_NO_TRIGGER)
  if (half_idle) allow_dependent_grids();
#endif
}

}  // namespace kdtree
