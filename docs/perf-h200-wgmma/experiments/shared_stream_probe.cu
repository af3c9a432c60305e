// Shared-stream probe: how fast one SM is fed when the KV tiles it streams are also read by
// another SM (the rows kernel at 128 rows: two row blocks per split, each tile read by two
// CTAs, half of it from L2), against every SM reading its own (64 rows), and what more bytes
// in flight would change. 132 CTAs (one per SM) of 256 threads each stream T tiles through a
// ring of NS stages as the wgmma kernels do: tile t + NS - 1 is issued by cp.async (16 bytes
// per thread and copy) once tile t has landed, into the stage tile t - 1 freed; then the CTA
// "computes" for C clock cycles (a spin) before it frees tile t's stage. NS = 2 stages of
// 72 KB is the shipped kernels' one tile in flight; NS = 4 of 36 KB (32-position tiles) is
// three in flight, which fits next to Q in shared memory.
// Sharing S: CTA b reads the tiles of CTA b % (132 / S).
// Prints µs per 72 KB of KV streamed per CTA, from the time of T = 16 and T = 32 tile pairs
// (the fixed part cancels), flushed by a 512 MiB read before each launch, median of 12.
// Build and run: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o ssp shared_stream_probe.cu && ./ssp
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

constexpr int kThreads = 256;

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

template <int NS, int kTileBytes>
__global__ void __launch_bounds__(kThreads, 1)
ring_kernel(const char* src, int tiles, int64_t cta_stride, int share, long long compute_cycles, float* sink) {
  extern __shared__ __align__(1024) unsigned char sm[];
  const char* base = src + (int64_t)(blockIdx.x % (gridDim.x / share)) * cta_stride;
  auto issue = [&](int t) {
    if (t < tiles) {
      const char* s = base + (int64_t)t * kTileBytes;
      const uint32_t d = smem_u32(sm + (t % NS) * kTileBytes);
#pragma unroll 4
      for (int off = threadIdx.x * 16; off < kTileBytes; off += kThreads * 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d + off), "l"(s + off));
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  for (int t = 0; t < NS - 1; ++t) issue(t);
  float acc = 0.f;
  for (int t = 0; t < tiles; ++t) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(NS - 2));
    __syncthreads();  // tile t landed; tile t - 1's stage is free
    issue(t + NS - 1);
    acc += ((const float*)(sm + (t % NS) * kTileBytes))[threadIdx.x];
    const long long t0 = clock64();
    while (clock64() - t0 < compute_cycles) {
    }
  }
  if (acc == 12345.f) sink[0] = acc;
}

__global__ void read_flush_kernel(const float4* p, int64_t n, float* sink) {
  float acc = 0.f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float4 v = p[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 12345.f) sink[0] = acc;
}

int main() {
  int sms = 0, clock_khz = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  const int64_t buf_bytes = 1ll << 30;
  char* src;
  cudaMalloc(&src, buf_bytes);
  cudaMemset(src, 1, buf_bytes);
  char* flush;
  const size_t flush_bytes = 512ull << 20;
  cudaMalloc(&flush, flush_bytes);
  cudaMemset(flush, 0, flush_bytes);
  float* sink;
  cudaMalloc(&sink, 4);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  auto flush_l2 = [&] { read_flush_kernel<<<sms * 8, 256>>>((const float4*)flush, flush_bytes / 16, sink); };
  auto median = [](std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // per 72 KB: (time(2T) - time(T)) / (T 72 KB units)
  auto per_72k = [&](auto kernel, int ns, int tile_bytes, int share, long long cycles_per_72k) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, ns * tile_bytes);
    const int per = 73728 / tile_bytes;  // tiles per 72 KB
    float t[2];
    for (int k = 0; k < 2; ++k) {
      const int tiles = (16 << k) * per;
      const int64_t stride = (int64_t)tiles * tile_bytes;
      std::vector<float> ts;
      for (int r = 0; r < 15; ++r) {
        flush_l2();
        cudaEventRecord(a);
        kernel<<<sms, kThreads, ns * tile_bytes>>>(src, tiles, stride, share, cycles_per_72k / per, sink);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        if (r >= 3) ts.push_back(ms);
      }
      t[k] = median(ts) * 1e3f;
    }
    return (t[1] - t[0]) / 16.f;
  };
  printf("SMs %d, clock %d MHz (the spin's cycles are at this rate)\n", sms, clock_khz / 1000);
  printf("| compute per 72 KB (cycles) | sharing | 2 x 72 KB (1 in flight) | 3 x 72 KB (2) | 4 x 36 KB (3) | 6 x 36 KB (5) |\n");
  printf("|---|---|---|---|---|---|\n");
  for (long long cyc : {0ll, 2500ll, 3200ll, 3800ll})
    for (int share : {1, 2}) {
      const float r1 = per_72k(ring_kernel<2, 73728>, 2, 73728, share, cyc);
      const float r2 = per_72k(ring_kernel<3, 73728>, 3, 73728, share, cyc);
      const float r3 = per_72k(ring_kernel<4, 36864>, 4, 36864, share, cyc);
      const float r4 = per_72k(ring_kernel<6, 36864>, 6, 36864, share, cyc);
      printf("| %lld | %d | %.2f | %.2f | %.2f | %.2f |\n", cyc, share, r1, r2, r3, r4);
    }
  const cudaError_t e = cudaDeviceSynchronize();
  printf("status: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
