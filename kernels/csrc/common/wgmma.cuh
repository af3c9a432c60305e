// Hopper warpgroup MMA (sm_90a) helpers: shared-memory matrix descriptors (their low words)
// for the 128-byte swizzled layout, wgmma.mma_async m64nNk16 (bf16 in, fp32 accumulate) with both operands
// in shared memory, and the fences that order it against ordinary loads and stores.
//
// Layout (both operands): a tile is stored as column blocks of 64 bf16 (128 bytes) per row;
// inside a block, row r's 16-byte chunk c sits at r*128 + ((c ^ (r % 8)) * 16), and the
// block starts on a 1024-byte boundary (the hardware's 128-byte swizzle). Read K-major
// (rows = M or N, contiguous = K) a k16 step is a +32-byte start address and 8-row groups
// are 1024 bytes apart; read MN-major (contiguous = M or N, rows = K) the same block gives a
// 64-wide M or N tile whose 8-row K groups are 1024 bytes apart (the descriptor's stride),
// and a wider N spans consecutive blocks, `leading` bytes apart.
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

// Named barrier for `threads` threads that also returns whether `pred` held in any of them
// (__syncthreads_or() for part of the CTA).
__device__ __forceinline__ bool named_barrier_or(int id, int threads, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any) : "r"(static_cast<uint32_t>(pred)), "r"(id), "r"(threads) : "memory");
  return any != 0;
}

// Arrive at named barrier `id` without waiting (the waiting side uses named_barrier).
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

// Warpgroup register reallocation (every warp of the warpgroup executes the same one): give
// registers back down to N per thread, or take them up to N (waits until the CTA has them).
template <int N>
__device__ __forceinline__ void release_registers() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N)); }
template <int N>
__device__ __forceinline__ void claim_registers() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N)); }

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

// Output operand lists of the wider shapes: "+f"(d[i]) ... "+f"(d[i + 31]).
#define KDTREE_F8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                        "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define KDTREE_F32(d, i) KDTREE_F8(d, i), KDTREE_F8(d, i + 8), KDTREE_F8(d, i + 16), KDTREE_F8(d, i + 24)

// D[64 x 32] (+)= A[64 x 16] . B[16 x 32], both operands K-major in shared memory (the rows
// path's S = Q . K^T over one warpgroup's 32 positions), offsets as for Mma.
struct MmaSS32 {
  template <int OffA, int OffB>
  __device__ __forceinline__ static void run(float* d, uint32_t a, uint32_t b, int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        KDTREE_WGMMA_DESC_PROLOGUE("%16, %20", "%17, %21", "%18", "%22")
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
        "}, da, db, p, 1, 1, %19, 0;\n}\n"
        : KDTREE_F8(d, 0), KDTREE_F8(d, 8)
        : "r"(a), "r"(b), "r"(accumulate), "n"(0), "n"(OffA), "n"(OffB), "n"(kDescHigh));
#endif
  }
};

// D[64 x 64] (+)= A[64 x 16] . B[16 x 64], both K-major in shared memory (the seesaw
// kernel's S = Q . K^T over a whole 64-position tile by one warpgroup), offsets as for Mma.
struct MmaSS64 {
  template <int OffA, int OffB>
  __device__ __forceinline__ static void run(float* d, uint32_t a, uint32_t b, int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        KDTREE_WGMMA_DESC_PROLOGUE("%32, %36", "%33, %37", "%34", "%38")
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
        "}, da, db, p, 1, 1, %35, 0;\n}\n"
        : KDTREE_F32(d, 0)
        : "r"(a), "r"(b), "r"(accumulate), "n"(0), "n"(OffA), "n"(OffB), "n"(kDescHigh));
#endif
  }
};

// D[64 x 256] += A[64 x 16] . B[16 x 256], A from registers (a[0..3]: this thread's bf16
// pairs in the layout of an m64nNk16 accumulator's k16 columns, i.e. a warpgroup's own
// softmax output), B N-major in shared memory as for MmaSS256; offset of B as for Mma.
struct MmaRS256 {
  template <int OffB>
  __device__ __forceinline__ static void run(float* d, const uint32_t* a, uint32_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "{\n.reg .pred p;\n.reg .b32 lb, hi;\n.reg .b64 db;\nmov.b32 hi, %134;\n"
        "add.u32 lb, %132, %133;\nmov.b64 db, {lb, hi};\n"
        "setp.ne.b32 p, hi, 0;\n"  // always true (the high word is never 0): accumulate
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
        "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
        "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
        "}, {%128,%129,%130,%131}, db, p, 1, 1, 1;\n}\n"
        : KDTREE_F32(d, 0), KDTREE_F32(d, 32), KDTREE_F32(d, 64), KDTREE_F32(d, 96)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b), "n"(OffB), "n"(kDescHigh));
#endif
  }
};

// D[64 x 256] += A[64 x 16] . B[16 x 256], A K-major in shared memory (the rows path's P,
// each half of its positions written by one warpgroup), B N-major (V's dims contiguous,
// 64-wide column blocks `leading` bytes apart); offsets as for Mma.
struct MmaSS256 {
  template <int OffA, int OffB>
  __device__ __forceinline__ static void run(float* d, uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "{\n.reg .pred p;\n.reg .b32 la, lb, hi;\n.reg .b64 da, db;\nmov.b32 hi, %132;\n"
        "add.u32 la, %128, %130;\nadd.u32 lb, %129, %131;\nmov.b64 da, {la, hi};\nmov.b64 db, {lb, hi};\n"
        "setp.ne.b32 p, hi, 0;\n"  // always true (the high word is never 0): accumulate
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
        "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
        "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
        "}, da, db, p, 1, 1, 0, 1;\n}\n"
        : KDTREE_F32(d, 0), KDTREE_F32(d, 32), KDTREE_F32(d, 64), KDTREE_F32(d, 96)
        : "r"(a), "r"(b), "n"(OffA), "n"(OffB), "n"(kDescHigh));
#endif
  }
};

#undef KDTREE_F32
#undef KDTREE_F8

#undef KDTREE_WGMMA_DESC_PROLOGUE

}  // namespace wgmma
}  // namespace kdtree
