// Streaming probe: 132 CTAs (one per SM) each stream T tiles of 73,728 bytes (64 KV rows of
// 1152 bytes) from a large buffer into shared memory, with D tiles in flight, by
//  (a) cp.async 16-byte copies from all 256 threads (as the shipped wgmma kernels), or
//  (b) one bulk copy (cp.async.bulk, TMA engine) per 8 KB column block, completed on an mbarrier.
// No math: measures how fast each way can feed an SM. Prints GB/s per variant, each launch
// timed alone after a read flush; then (Session 39) a second table timed as a loop: 16 launches
// on rotated regions in one CUDA graph, plain and as programmatic launches.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>

constexpr int kTileBytes = 73728, kThreads = 256, kMaxStages = 3;

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// depth-aware cp.async: wait until only depth-1 groups are pending
// kPdl: behind the wait a correct kernel of a programmatic launch needs before its first
// global read (the verify kernels' order: let the next grid launch, then wait).
template <int D, bool kPdl = false>
__global__ void __launch_bounds__(kThreads, 1) cpasync_depth_kernel(const char* src, int tiles, int64_t cta_stride, float* sink) {
  if constexpr (kPdl) {
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
  }
  extern __shared__ __align__(1024) unsigned char sm[];
  const char* base = src + blockIdx.x * cta_stride;
  auto issue = [&](int t) {
    if (t < tiles) {
      const char* s = base + (int64_t)t * kTileBytes;
      uint32_t d = smem_u32(sm + (t % D) * kTileBytes);
      for (int off = threadIdx.x * 16; off < kTileBytes; off += kThreads * 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(d + off), "l"(s + off));
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  for (int t = 0; t < D; ++t) issue(t);
  float acc = 0.f;
  for (int t = 0; t < tiles; ++t) {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(D - 1));
    __syncthreads();
    acc += ((float*)(sm + (t % D) * kTileBytes))[threadIdx.x];
    __syncthreads();  // stage free
    issue(t + D);
  }
  if (acc == 12345.f) sink[0] = acc;
}

template <int D>
__global__ void __launch_bounds__(kThreads, 1) bulk_kernel(const char* src, int tiles, int64_t cta_stride, float* sink, int pieces) {
  extern __shared__ __align__(1024) unsigned char sm[];
  __shared__ __align__(8) uint64_t bar[kMaxStages];
  const char* base = src + blockIdx.x * cta_stride;
  if (threadIdx.x == 0) {
    for (int s = 0; s < D; ++s) asm volatile("mbarrier.init.shared.b64 [%0], 1;\n" :: "r"(smem_u32(&bar[s])));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int piece = kTileBytes / pieces;
  auto issue = [&](int t) {
    if (threadIdx.x != 0 || t >= tiles) return;
    const int s = t % D;
    uint32_t b = smem_u32(&bar[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" :: "r"(b), "r"(kTileBytes) : "memory");
    const char* g = base + (int64_t)t * kTileBytes;
    uint32_t d = smem_u32(sm + s * kTileBytes);
    for (int k = 0; k < pieces; ++k)
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                   :: "r"(d + k * piece), "l"(g + (int64_t)k * piece), "r"(piece), "r"(b) : "memory");
  };
  for (int t = 0; t < D; ++t) issue(t);
  float acc = 0.f;
  for (int t = 0; t < tiles; ++t) {
    const int s = t % D;
    const uint32_t phase = (t / D) & 1;
    uint32_t b = smem_u32(&bar[s]);
    asm volatile("{\n.reg .pred p;\nWAIT_%=:\nmbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n@!p bra WAIT_%=;\n}\n" :: "r"(b), "r"(phase) : "memory");
    acc += ((float*)(sm + s * kTileBytes))[threadIdx.x];
    __syncthreads();  // stage free
    issue(t + D);
  }
  if (acc == 12345.f) sink[0] = acc;
}

__global__ void read_flush_kernel(const float4* p, int64_t n, float* sink) {
  float acc = 0.f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float4 v = p[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 12345.f) sink[0] = acc;
}

__global__ void empty_kernel(float* sink) { if (threadIdx.x == 9999) sink[0] = 1.f; }

int main() {
  int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int64_t buf_bytes = 1ll << 30;
  char* src; cudaMalloc(&src, buf_bytes); cudaMemset(src, 1, buf_bytes);
  char* flush; const size_t flush_bytes = 512ull << 20; cudaMalloc(&flush, flush_bytes);
  char* dst; cudaMalloc(&dst, buf_bytes);
  float* sink; cudaMalloc(&sink, 4);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  cudaMemset(flush, 0, flush_bytes);
  // the perf harness's flush: 512 MiB read (clean lines; a memset would leave L2 dirty and
  // make the next kernel pay for write-backs)
  auto flush_l2 = [&] { read_flush_kernel<<<sms * 8, 256>>>((const float4*)flush, flush_bytes / 16, sink); };
  auto median = [](std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
  for (auto f : {(const void*)cpasync_depth_kernel<1>, (const void*)cpasync_depth_kernel<2>, (const void*)cpasync_depth_kernel<3>,
                 (const void*)bulk_kernel<1>, (const void*)bulk_kernel<2>, (const void*)bulk_kernel<3>})
    cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxStages * kTileBytes);
  printf("SMs %d\n| tiles per CTA | MB | copy D2D GB/s (read + written) | cp.async D1 | D2 | D3 | bulk 9x8K D1 | D2 | D3 | bulk 1x72K D2 | cp.async 2 CTAs/SM D1 | 3 CTAs/SM D1 |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n", sms);
  for (int tiles : {2, 4, 6, 8, 12, 16, 32}) {
    const int64_t stride = (int64_t)tiles * kTileBytes;
    const double bytes = (double)sms * stride;
    auto time_it = [&](auto launch) {
      std::vector<float> ts;
      for (int r = 0; r < 15; ++r) {
        flush_l2();
        cudaEventRecord(a); launch(); cudaEventRecord(b); cudaEventSynchronize(b);
        float ms; cudaEventElapsedTime(&ms, a, b); if (r >= 3) ts.push_back(ms);
      }
      return bytes / (median(ts) * 1e-3) / 1e9;
    };
    double copy = 2 * time_it([&] { cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice); });  // read + written
    double c1 = time_it([&] { cpasync_depth_kernel<1><<<sms, kThreads, 1 * kTileBytes>>>(src, tiles, stride, sink); });
    double c2 = time_it([&] { cpasync_depth_kernel<2><<<sms, kThreads, 2 * kTileBytes>>>(src, tiles, stride, sink); });
    double c3 = time_it([&] { cpasync_depth_kernel<3><<<sms, kThreads, 3 * kTileBytes>>>(src, tiles, stride, sink); });
    double b1 = time_it([&] { bulk_kernel<1><<<sms, kThreads, 1 * kTileBytes>>>(src, tiles, stride, sink, 9); });
    double b2 = time_it([&] { bulk_kernel<2><<<sms, kThreads, 2 * kTileBytes>>>(src, tiles, stride, sink, 9); });
    double b3 = time_it([&] { bulk_kernel<3><<<sms, kThreads, 3 * kTileBytes>>>(src, tiles, stride, sink, 9); });
    double b2one = time_it([&] { bulk_kernel<2><<<sms, kThreads, 2 * kTileBytes>>>(src, tiles, stride, sink, 1); });
    // more CTAs per SM (k of them, one stage each), the same bytes: tiles / k tiles per CTA
    double k2 = 0, k3 = 0;
    if (tiles % 2 == 0) {
      const int64_t st = (int64_t)(tiles / 2) * kTileBytes;
      k2 = time_it([&] { cpasync_depth_kernel<1><<<2 * sms, kThreads, kTileBytes>>>(src, tiles / 2, st, sink); });
    }
    if (tiles >= 4) {
      const int per = (tiles + 2) / 3;  // 3 x per >= tiles: a little more data; scaled below
      const int64_t st = (int64_t)per * kTileBytes;
      k3 = time_it([&] { cpasync_depth_kernel<1><<<3 * sms, kThreads, kTileBytes>>>(src, per, st, sink); }) * (3.0 * per / tiles);
    }
    printf("| %d | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", tiles, bytes / 1e6, copy, c1, c2, c3, b1, b2, b3, b2one, k2, k3);
  }
  // Loop timing (the issue's other permitted way: inputs rotated, no flush): L launches in one
  // CUDA graph, each on its own region of the buffer, timed together and divided by L.
  cudaFuncSetAttribute((const void*)cpasync_depth_kernel<2, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * kTileBytes);
  cudaStream_t cs; cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
  printf("\nloop timing, us per launch (GB/s read):\n| tiles per CTA | MB | launches | cp.async D2 | the same, programmatic launches behind griddepcontrol.wait | copy D2D of the same bytes (read + written) | empty kernel |\n|---|---|---|---|---|---|---|\n");
  for (int tiles : {2, 4, 8, 16}) {
    const int64_t stride = (int64_t)tiles * kTileBytes;
    const int64_t bytes = (int64_t)sms * stride;
    const int L = (int)std::min<int64_t>(16, buf_bytes / bytes);
    auto loop_us = [&](auto launch_one) {
      cudaGraph_t g; cudaGraphExec_t ge;
      cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal);
      for (int l = 0; l < L; ++l) launch_one(src + (int64_t)l * bytes, l);
      cudaStreamEndCapture(cs, &g); cudaGraphInstantiate(&ge, g, 0);
      std::vector<float> ts;
      for (int r = 0; r < 15; ++r) {
        cudaGraphLaunch(ge, cs);
        cudaEventRecord(a, cs); cudaGraphLaunch(ge, cs); cudaEventRecord(b, cs); cudaEventSynchronize(b);
        float ms; cudaEventElapsedTime(&ms, a, b); if (r >= 3) ts.push_back(ms);
      }
      cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
      return median(ts) * 1e3 / L;
    };
    const double d2 = loop_us([&](const char* s, int) { cpasync_depth_kernel<2><<<sms, kThreads, 2 * kTileBytes, cs>>>(s, tiles, stride, sink); });
    const double pdl = loop_us([&](const char* s, int) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(sms); cfg.blockDim = dim3(kThreads); cfg.dynamicSmemBytes = 2 * kTileBytes; cfg.stream = cs;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; attr[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = attr; cfg.numAttrs = 1;
      cudaLaunchKernelEx(&cfg, cpasync_depth_kernel<2, true>, s, tiles, stride, sink);
    });
    const double cp = loop_us([&](const char* s, int l) { cudaMemcpyAsync(dst + (int64_t)l * (bytes / 2), s, (size_t)(bytes / 2), cudaMemcpyDeviceToDevice, cs); });
    const double em = loop_us([&](const char*, int) { empty_kernel<<<sms, kThreads, 0, cs>>>(sink); });
    auto gbps = [&](double us) { return us > 0 ? bytes / (us * 1e-6) / 1e9 : 0.0; };
    printf("| %d | %.1f | %d | %.2f (%.0f) | %.2f (%.0f) | %.2f (%.0f) | %.2f |\n", tiles, bytes / 1e6, L, d2, gbps(d2), pdl,
           gbps(pdl), cp, gbps(cp), em);
  }
  {
    std::vector<float> ts;
    for (int r = 0; r < 15; ++r) {
      flush_l2();
      cudaEventRecord(a); empty_kernel<<<sms, kThreads>>>(sink); cudaEventRecord(b); cudaEventSynchronize(b);
      float ms; cudaEventElapsedTime(&ms, a, b); if (r >= 3) ts.push_back(ms);
    }
    printf("empty kernel (%d CTAs), timed the same way: %.2f us\n", sms, median(ts) * 1e3);
  }
  cudaError_t e = cudaDeviceSynchronize();
  printf("status: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
