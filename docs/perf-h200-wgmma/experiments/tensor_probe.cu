// Tensor-core probe: how fast the wgmma shapes of the verify kernels run when nothing else
// happens. 132 CTAs (one per SM), operands in shared memory laid out as in the kernels
// (kernels/csrc/common/wgmma.cuh: 128-byte swizzled column blocks; Q of 64 rows x 576, a KV
// tile of 64 positions x 576, P of 64 x 64), each warpgroup issuing one group of MMAs after
// another (fence, MMAs, commit, wait), no loads; the last two variants add a softmax-like
// step per tile, in the shipped order and in FlashAttention-3's. Prints TFLOP/s per shape;
// the bench's matmul ceiling (torch, 8192^3 bf16) is the reference it is read against.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/csrc \
//        -o tensor_probe docs/perf-h200-wgmma/experiments/tensor_probe.cu && ./tensor_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "common/wgmma.cuh"

using namespace kdtree;

constexpr int kBlock = 64 * 128;             // one 64-row column block
constexpr int kQ = 0, kK = 9 * kBlock, kP = 18 * kBlock;
constexpr int kSmem = 19 * kBlock + 1024;  // Q, KV tile, P, alignment slack

// D[64 x 64] (+)= A[64 x 16] . B[16 x 64], both K-major in shared memory (a whole 64-position
// tile's scores for 64 rows by one warpgroup).
struct MmaSS64 {
  template <int OffA, int OffB>
  __device__ __forceinline__ static void run(float* d, uint32_t a, uint32_t b, int accumulate) {
#define F8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
              "+f"(d[i + 6]), "+f"(d[i + 7])
    asm volatile(
        "{\n.reg .pred p;\n.reg .b32 la, lb, hi;\n.reg .b64 da, db;\n"
        "setp.ne.b32 p, %34, 0;\nmov.b32 hi, %37;\nadd.u32 la, %32, %35;\nadd.u32 lb, %33, %36;\n"
        "mov.b64 da, {la, hi};\nmov.b64 db, {lb, hi};\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
        "}, da, db, p, 1, 1, 0, 0;\n}\n"
        : F8(0), F8(8), F8(16), F8(24)
        : "r"(a), "r"(b), "r"(accumulate), "n"(OffA), "n"(OffB), "n"(wgmma::kDescHigh));
#undef F8
  }
};

// Rows kernel QK: S_w [64 rows x 32 positions] over 576 dims (36 k16 steps), warpgroup w's half.
template <int... I>
__device__ __forceinline__ void qk32(float* s, uint32_t q, uint32_t k, std::integer_sequence<int, I...>) {
  (wgmma::MmaSS32::run<((I / 4) * kBlock + (I % 4) * 32) / 16, ((I / 4) * kBlock + (I % 4) * 32) / 16>(s, q, k, I != 0), ...);
}
// A whole tile's QK by one warpgroup: S [64 rows x 64 positions].
template <int... I>
__device__ __forceinline__ void qk64(float* s, uint32_t q, uint32_t k, std::integer_sequence<int, I...>) {
  (MmaSS64::run<((I / 4) * kBlock + (I % 4) * 32) / 16, ((I / 4) * kBlock + (I % 4) * 32) / 16>(s, q, k, I != 0), ...);
}
// Rows kernel PV: O_w [64 rows x 256 dims] += P [64 x 64] . V [64 x 256] (4 k16 steps).
template <int... I>
__device__ __forceinline__ void pv256(float* o, uint32_t p, uint32_t v, std::integer_sequence<int, I...>) {
  (wgmma::MmaSS256::run<(I * 32) / 16, (I * 2048) / 16>(o, p, v), ...);
}
// 16-row kernel QK: S^T [64 positions x 16 rows] = K . Q^T over 576 dims.
template <int... I>
__device__ __forceinline__ void qk16t(float* s, uint32_t k, uint32_t q, std::integer_sequence<int, I...>) {
  (wgmma::Mma<16, 0>::run<((I / 4) * kBlock + (I % 4) * 32) / 16, ((I / 4) * 2048 + (I % 4) * 32) / 16>(s, k, q, I != 0), ...);
}

enum Shape { kQk32, kQk64, kPv256, kTile, kQk16t };

// `groups` groups per warpgroup; warpgroups >= `math_wgs` only wait at the end.
template <Shape S>
__global__ void __launch_bounds__(256, 1) probe(int groups, int math_wgs, float* sink) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  for (int i = threadIdx.x; i < 19 * kBlock / 4; i += blockDim.x)  // small finite values
    reinterpret_cast<uint32_t*>(smem_raw + (base - raw))[i] = 0x3c003c00u;
  __syncthreads();
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (wg >= math_wgs) return;
  float s[32] = {}, o[128] = {};
  const uint32_t q = wgmma::descriptor_low(base + kQ, 16);
  for (int g = 0; g < groups; ++g) {
    wgmma::fence();
    if constexpr (S == kQk32) qk32(s, q, wgmma::descriptor_low(base + kK + wg * 32 * 128, 16), std::make_integer_sequence<int, 36>{});
    if constexpr (S == kQk64) qk64(s, q, wgmma::descriptor_low(base + kK, 16), std::make_integer_sequence<int, 36>{});
    if constexpr (S == kPv256) pv256(o, wgmma::descriptor_low(base + kP, 16), wgmma::descriptor_low(base + kK + wg * 4 * kBlock, kBlock), std::make_integer_sequence<int, 4>{});
    if constexpr (S == kQk16t) qk16t(s, wgmma::descriptor_low(base + kK, 16), q, std::make_integer_sequence<int, 36>{});
    if constexpr (S == kTile) {
      qk32(s, q, wgmma::descriptor_low(base + kK + wg * 32 * 128, 16), std::make_integer_sequence<int, 36>{});
      wgmma::commit();
      wgmma::wait<0>();
      for (int i = 0; i < 16; ++i) wgmma::pin(s[i]);
      wgmma::fence();
      pv256(o, wgmma::descriptor_low(base + kP, 16), wgmma::descriptor_low(base + kK + wg * 4 * kBlock, kBlock), std::make_integer_sequence<int, 4>{});
    }
    wgmma::commit();
    wgmma::wait<0>();
    for (int i = 0; i < 32; ++i) wgmma::pin(s[i]);
    for (int i = 0; i < 128; ++i) wgmma::pin(o[i]);
  }
  float acc = 0.f;
  for (int i = 0; i < 32; ++i) acc += s[i];
  for (int i = 0; i < 128; ++i) acc += o[i];
  if (acc == 12345.f) sink[threadIdx.x] = acc;  // keeps the MMAs alive
}

// A rows-kernel tile per warpgroup with a softmax-like step between its QK and its PV: each
// score row's maximum over the quad, 2^(s - max), P rounded to bf16 and stored, swizzled, to
// this warpgroup's P buffer (positions 0-31 of 64; the PV reads all 64 as the kernel's does).
// Serial: QK, wait, softmax, PV, wait (the shipped order). Overlapped: the next tile's QK and
// this tile's PV issued together and the next tile's softmax run while the PV runs (P
// double-buffered), both groups waited for within the iteration.
__device__ __forceinline__ void softmax_to_p(float* s, uint32_t p_block, int wg) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4, g = lane / 4, t = lane % 4;
  float mx[2] = {-INFINITY, -INFINITY};
  for (int i = 0; i < 16; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
  }
  for (int kk = 0; kk < 2; ++kk)
    for (int r = 0; r < 4; ++r) {
      const int i = 8 * kk + 2 * r, row = 16 * warp + g + 8 * (r & 1);
      float p0, p1;
      asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(p0) : "f"(s[i] - mx[r & 1]));
      asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(p1) : "f"(s[i + 1] - mx[r & 1]));
      __nv_bfloat162 v = __floats2bfloat162_rn(p0, p1);
      const uint32_t at = p_block + wgmma::swizzled(row, 2 * kk + (r >> 1)) + 4 * t;
      asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(at), "r"(*reinterpret_cast<uint32_t*>(&v)) : "memory");
    }
  wgmma::fence_shared_for_async();
  wgmma::named_barrier(1 + wg, 128);  // this warpgroup's P complete
}

// One rows-kernel QK group waited for at once: S_w over 576 dims, as in the shipped tile.
__device__ __forceinline__ void rows_scores(float* s, uint32_t q, uint32_t k) {
  wgmma::fence();
  qk32(s, q, k, std::make_integer_sequence<int, 36>{});
  wgmma::commit();
  wgmma::wait<0>();
  for (int i = 0; i < 16; ++i) wgmma::pin(s[i]);
}

template <bool Overlap>
__global__ void __launch_bounds__(256, 1) tile_probe(int tiles, float* sink) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  for (int i = threadIdx.x; i < 22 * kBlock / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem_raw + (base - raw))[i] = 0x3c003c00u;
  __syncthreads();
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  float s[16] = {}, o[128] = {};
  const uint32_t q = wgmma::descriptor_low(base + kQ, 16);
  const uint32_t k = wgmma::descriptor_low(base + kK + wg * 32 * 128, 16);
  const uint32_t v = wgmma::descriptor_low(base + kK + wg * 4 * kBlock, kBlock);
  const uint32_t p0 = base + kP + (2 * wg) * kBlock, p1 = p0 + kBlock;  // the P buffers
  if (!Overlap) {
    for (int it = 0; it < tiles; ++it) {
      rows_scores(s, q, k);
      softmax_to_p(s, p0, wg);
      wgmma::fence();
      pv256(o, wgmma::descriptor_low(p0, 16), v, std::make_integer_sequence<int, 4>{});
      wgmma::commit();
      wgmma::wait<0>();
      for (int i = 0; i < 128; ++i) wgmma::pin(o[i]);
    }
  } else {
    rows_scores(s, q, k);
    softmax_to_p(s, p0, wg);
    for (int it = 0; it < tiles; ++it) {
      wgmma::fence();
      qk32(s, q, k, std::make_integer_sequence<int, 36>{});
      wgmma::commit();
      pv256(o, wgmma::descriptor_low(it & 1 ? p1 : p0, 16), v, std::make_integer_sequence<int, 4>{});
      wgmma::commit();
      wgmma::wait<1>();  // the QK
      for (int i = 0; i < 16; ++i) wgmma::pin(s[i]);
      softmax_to_p(s, it & 1 ? p0 : p1, wg);
      wgmma::wait<0>();  // the PV
      for (int i = 0; i < 128; ++i) wgmma::pin(o[i]);
    }
  }
  float acc = 0.f;
  for (int i = 0; i < 16; ++i) acc += s[i];
  for (int i = 0; i < 128; ++i) acc += o[i];
  if (acc == 12345.f) sink[threadIdx.x] = acc;
}

// Median of 6 timed launches (after 2 untimed), ms, and the run's error state printed.
template <class Launch>
double median_ms(Launch launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ts;
  for (int r = 0; r < 8; ++r) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    if (r >= 2) ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) std::printf("error: %s\n", cudaGetErrorString(e));
  return ts[ts.size() / 2];
}

template <bool Overlap>
void measure_tile(const char* name, int sms, float* sink) {
  constexpr int smem = 22 * kBlock + 1024;
  cudaFuncSetAttribute(tile_probe<Overlap>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const int tiles = 4000;
  const double ms = median_ms([&] { tile_probe<Overlap><<<sms, 256, smem>>>(tiles, sink); });
  const double flops = (36.0 * 2 * 64 * 32 * 16 + 4.0 * 2 * 64 * 256 * 16) * tiles * 2 * sms;
  std::printf("| %s | 2 | %.0f |\n", name, flops / ms / 1e9);
}

// FLOPs of one group of one warpgroup.
double group_flops(Shape s) {
  switch (s) {
    case kQk32: return 36.0 * 2 * 64 * 32 * 16;
    case kQk64: return 36.0 * 2 * 64 * 64 * 16;
    case kPv256: return 4.0 * 2 * 64 * 256 * 16;
    case kTile: return 36.0 * 2 * 64 * 32 * 16 + 4.0 * 2 * 64 * 256 * 16;
    case kQk16t: return 36.0 * 2 * 64 * 16 * 16;
  }
  return 0;
}

template <Shape S>
void measure(const char* name, int math_wgs, int sms, float* sink) {
  cudaFuncSetAttribute(probe<S>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  const int groups = 4000;
  const double ms = median_ms([&] { probe<S><<<sms, 256, kSmem>>>(groups, math_wgs, sink); });
  const double flops = group_flops(S) * groups * math_wgs * sms;
  std::printf("| %s | %d | %.0f |\n", name, math_wgs, flops / ms / 1e9);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* sink;
  cudaMalloc(&sink, 256 * sizeof(float));
  std::printf("%d SMs\n\n| MMA group (per warpgroup) | warpgroups | TFLOP/s |\n|---|---|---|\n", sms);
  measure<kQk32>("rows QK: 36 x m64n32k16 (Q . K_w^T, half a tile)", 2, sms, sink);
  measure<kQk32>("rows QK: 36 x m64n32k16", 1, sms, sink);
  measure<kQk64>("whole-tile QK: 36 x m64n64k16", 2, sms, sink);
  measure<kQk64>("whole-tile QK: 36 x m64n64k16", 1, sms, sink);
  measure<kPv256>("rows PV: 4 x m64n256k16 (P . V_w, V MN-major)", 2, sms, sink);
  measure<kTile>("rows tile: QK, wait, PV", 2, sms, sink);
  measure<kQk16t>("16-row QK: 36 x m64n16k16 (K . Q^T)", 1, sms, sink);
  measure<kQk16t>("16-row QK: 36 x m64n16k16 (K . Q^T)", 2, sms, sink);
  measure_tile<false>("rows tile with a softmax step: QK, wait, softmax, PV, wait", sms, sink);
  measure_tile<true>("rows tile with a softmax step: next QK and this PV together, softmax under the PV", sms, sink);
  return 0;
}
