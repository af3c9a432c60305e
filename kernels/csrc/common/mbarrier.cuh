// Shared-memory barrier objects (mbarrier, sm_80 and later) that count cp.async copies: a
// stage of shared memory filled by several threads at different times is complete when each
// of them has arrived once, and a thread's arrival lands only once every cp.async it issued
// before it has landed. Consumers wait for a phase by its parity (fill f of a barrier
// completes phase f, parity f & 1), with no CTA-wide barrier.
#pragma once
#include <cstdint>

namespace kdtree {
namespace mbarrier {

// Initialise the barrier at shared address `addr` for `count` arrivals per phase (one thread;
// the CTA must synchronise before any other thread uses it).
__device__ __forceinline__ void init(uint32_t addr, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(addr), "r"(count) : "memory");
}

// This thread's arrival on the barrier at `addr`, triggered once all the cp.async copies it
// issued before this call have landed (counts as one of the phase's `count` arrivals).
__device__ __forceinline__ void arrive_after_copies(uint32_t addr) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(addr) : "memory");
}

// This thread's arrival on the barrier at `addr` (one of the phase's `count`).
__device__ __forceinline__ void arrive(uint32_t addr) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" :: "r"(addr) : "memory");
}

// Block until the phase of parity `parity` of the barrier at `addr` has completed; the copies
// counted in it are then visible to this thread.
__device__ __forceinline__ void wait(uint32_t addr, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "KDTREE_MBAR_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra KDTREE_MBAR_WAIT;\n}\n" :: "r"(addr), "r"(parity) : "memory");
}

}  // namespace mbarrier
}  // namespace kdtree
