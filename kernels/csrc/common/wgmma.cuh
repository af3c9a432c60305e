// Hopper warpgroup MMA (sm_90a) helpers: shared-memory matrix descriptors (their low words)
// for the 128-byte swizzled layout, wgmma.mma_async m64nNk16 (bf16 in, fp32 accumulate) with both operands
// in shared memory, and the fences that order it against ordinary loads and stores.
//
// Layout (both operands): a tile is stored as column blocks of 64 bf16 (128 bytes) per row;
// inside a block, row r's 16-byte chunk c sits at r*128 + ((c ^ (r % 8)) * 16), and the
// block starts on a 1024-byte boundary (the hardware's 128-byte swizzle). Read K-major
// (rows = M or N, contiguous = K) a k16 step is a +32-byte start address and 8-row groups
// are 1024 bytes apart; read MN-major (contiguous = M, rows = K) the same block gives a
// 64-wide M tile whose 8-row K groups are 1024 bytes apart.
#pragma once
#include <cstdint>

namespace kdtree {
namespace wgmma {

// Byte offset of (row, 16-byte chunk) inside a 128-byte-swizzled column block.
__host__ __device__ __forceinline__ uint32_t swizzled(uint32_t row, uint32_t chunk) {
  return row * 128u + ((chunk ^ (row & 7u)) << 4);
}

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }

// Ordinary shared-memory stores (or landed cp.async data) made visible to wgmma's reads.
__device__ __forceinline__ void fence_shared_for_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Keep the compiler from moving accumulator reads or writes across a wgmma wait.
__device__ __forceinline__ void pin(float& r) { asm volatile("" : "+f"(r) :: "memory"); }

// Named barrier for `threads` threads (a multiple of 32) of the CTA; id 0 is __syncthreads.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

// Arrive at named barrier `id` without waiting (the waiting side uses named_barrier).
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

// Low 32 bits of the descriptor of a 128-byte-swizzled operand at shared address `addr`
// (bytes) with leading byte offset `leading` (see the header comment); the high word is
// the same for every operand here (stride 1024 bytes, 128-byte swizzle): kDescHigh.
__device__ __forceinline__ uint32_t descriptor_low(uint32_t addr, uint32_t leading) {
  return ((addr >> 4) & 0x3FFFu) | (((leading >> 4) & 0x3FFFu) << 16);
}
constexpr uint32_t kDescHigh = (1024u >> 4) | (1u << 30);

// D[64 x N] (+)= A[64 x 16] . B[16 x N]; A and B by the low words of their descriptors
// (descriptor_low), each plus a compile-time offset in 16-byte units added inside the asm
// as a 32-bit add: the start address field cannot carry (shared addresses < 2^18 bytes),
// and warp-uniform bases keep the whole computation in uniform registers instead of a
// 64-bit add and two register moves per MMA. `accumulate` 0 overwrites D. TransA: A is
// MN-major (M contiguous). B is K-major.
#define KDTREE_WGMMA_DESC_PROLOGUE(A, B, ACC, HIGH)                                  \
  "{\n.reg .pred p;\n.reg .b32 la, lb, hi;\n.reg .b64 da, db;\n"                   \
  "setp.ne.b32 p, " ACC ", 0;\nmov.b32 hi, " HIGH ";\n"                             \
  "add.u32 la, " A ";\nadd.u32 lb, " B ";\n"                                         \
  "mov.b64 da, {la, hi};\nmov.b64 db, {lb, hi};\n"

template <int N, int TransA>
struct Mma;

template <int TransA>
struct Mma<32, TransA> {
  template <int OffA, int OffB>
  __device__ __forceinline__ static void run(float* d, uint32_t a, uint32_t b, int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        KDTREE_WGMMA_DESC_PROLOGUE("%16, %20", "%17, %21", "%18", "%22")
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, da, db, p, 1, 1, %19, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a), "r"(b), "r"(accumulate), "n"(TransA), "n"(OffA), "n"(OffB), "n"(kDescHigh));
#endif
  }
};

template <int TransA>
struct Mma<16, TransA> {
  template <int OffA, int OffB>
  __device__ __forceinline__ static void run(float* d, uint32_t a, uint32_t b, int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        KDTREE_WGMMA_DESC_PROLOGUE("%8, %12", "%9, %13", "%10", "%14")
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7}, da, db, p, 1, 1, %11, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a), "r"(b), "r"(accumulate), "n"(TransA), "n"(OffA), "n"(OffB), "n"(kDescHigh));
#endif
  }
};

#undef KDTREE_WGMMA_DESC_PROLOGUE

}  // namespace wgmma
}  // namespace kdtree
