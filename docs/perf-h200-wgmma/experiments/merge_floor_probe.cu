// Merge-floor probe (Session 45; its few-SM table, Session 46): a floor under the time of a
// split-KV call of a bs-1 ctx-16k memory-bound case (18,883,584 bytes of KV: 16,392 positions x
// 1,152), under the two timings issue #7 allows, against the 0.80-of-copy budget of target 1. Every
// form is faster than a verify call could be: no indices, Q, mask or math, and 16-byte partials
// where a real split writes 8-64 KB.
//
// A bs-1 request has to spread its KV over the SMs to stream it near the copy ceiling, so the
// splits' results must be merged after the last split ends. The probe streams 256 tiles of
// 64 positions (18,874,368 bytes: a little less than the case, which favours the stream) into
// shared memory and does no math, on three grid shapes, in five forms:
//   stream       the bytes only (no merge: not a verify call);
//   + signal     every CTA then adds 1 to a counter (acquire-release), the last to
//                arrive learns it is last (one way a grid learns that every split ended);
//   + merge      as + signal, and the last CTA reads one 16-byte partial of every CTA
//                (acquire) and writes their sum: a last-arriver merge;
//   + flagged    every CTA writes its 16-byte partial with a flag in the same store; CTA 0,
//                after its own stream, polls every CTA's record until all are flagged, then
//                writes the sum and clears the flags: no counter, one hop from the last
//                split's store to the merger (NCCL's LL protocol's idea);
//   + 2nd kernel the stream, then a dependent kernel of one CTA that reads the 16-byte
//                partials: the shipped design's shape (a combine kernel behind
//                griddepcontrol.wait).
// Each form is timed (a) flushed: one launch after a 512 MiB read flush, CUDA events, median
// of 12; (b) rotated: 16 programmatic launches on rotated 18.9 MB regions in one CUDA graph,
// each behind griddepcontrol.wait, per launch, median of 12 replays; each cell the least of three
// passes over the whole table. The copy ceiling is the
// bench's: a 2 GiB device-to-device copy, bytes read + written, best of 8 medians of 10.
// Prints every form on every grid under both timings, the bare stream from 16-128 SMs (by
// cp.async and by bulk copies, three tiles in flight per CTA), then the
// least merged call against the budget; exit 1 on a CUDA error.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o merge_floor_probe merge_floor_probe.cu
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

constexpr int kTileBytes = 73728;        // 64 positions x 1,152 bytes
constexpr int kTiles = 256;              // 16,384 positions
constexpr double kCaseBytes = 16392.0 * 1152.0;  // bs1 ctx16k N8: bytes = (ctx + N) x 1152
constexpr int kThreads = 256;

enum Merge : int { kNone = 0, kSignal = 1, kReduce = 2, kFlagged = 3, kBulk = 4 /* no merge: the stream by bulk copies */ };

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// A 16-byte load, relaxed at GPU scope (sees other SMs' stores without a cache hint).
__device__ __forceinline__ float4 load_relaxed(const float4* at) {
  float4 p;
  asm volatile("ld.relaxed.gpu.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(p.x), "=f"(p.y), "=f"(p.z), "=f"(p.w) : "l"(at) : "memory");
  return p;
}

// Adds every thread's v; thread 0 writes the CTA's sum to *dst. Call from every thread.
__device__ __forceinline__ void write_block_sum(float v, float* dst) {
  __shared__ float warp_sum[kThreads / 32];
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) s += warp_sum[w];
    *dst = s;
  }
}

// Streams pieces [blockIdx.x * per, +per) of `src` (piece: bytes per piece, a tile or a
// fraction of one) through S shared-memory stages with cp.async, then does merge step `M`. `counter` only grows: each launch adds gridDim.x, so the CTA whose add
// returns a multiple of gridDim.x minus one is the launch's last.
template <int M, int S = 2>
__global__ void __launch_bounds__(kThreads, 1)
stream_kernel(const char* src, int per, int piece, float4* partials, unsigned* counter, float* out) {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  extern __shared__ __align__(1024) unsigned char sm[];
  __shared__ int last;
  const char* base = src + (int64_t)blockIdx.x * per * piece;
  auto issue = [&](int t) {
    if (t < per) {
      const char* s = base + (int64_t)t * piece;
      const uint32_t d = smem_u32(sm + (t % S) * piece);
      for (int off = threadIdx.x * 16; off < piece; off += kThreads * 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d + off), "l"(s + off));
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  for (int t = 0; t < S; ++t) issue(t);
  float acc = 0.f;
  for (int t = 0; t < per; ++t) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 1));
    __syncthreads();
    acc += reinterpret_cast<const float*>(sm + (t % S) * piece)[threadIdx.x];
    __syncthreads();
    issue(t + S);
  }
  if constexpr (M == kNone) {
    if (acc == 12345.f) out[0] = acc;
  } else if constexpr (M == kFlagged) {
    if (threadIdx.x == 0)
      asm volatile("st.relaxed.gpu.v4.f32 [%0], {%1,%2,%3,%4};\n" ::"l"(partials + blockIdx.x), "f"(acc), "f"(1.f),
                   "f"(0.f), "f"(0.f) : "memory");
    if (blockIdx.x == 0) {  // the merger: every record flagged, then the sum, then the flags cleared
      float v = 0.f;
      for (unsigned i = threadIdx.x; i < gridDim.x; i += kThreads) {
        float4 p;
        do p = load_relaxed(partials + i);
        while (p.y != 1.f);
        v += p.x;
        asm volatile("st.relaxed.gpu.v4.f32 [%0], {%1,%2,%3,%4};\n" ::"l"(partials + i), "f"(0.f), "f"(0.f),
                     "f"(0.f), "f"(0.f) : "memory");
      }
      write_block_sum(v, out + 3);
    }
  } else {
    if (threadIdx.x == 0) {
      partials[blockIdx.x] = make_float4(acc, 0.f, 0.f, 0.f);
      unsigned old;
      asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;\n" : "=r"(old) : "l"(counter) : "memory");
      last = (old + 1) % gridDim.x == 0;
    }
    __syncthreads();
    if (M == kReduce && last) {
      asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
      float v = 0.f;
      for (unsigned i = threadIdx.x; i < gridDim.x; i += kThreads) v += load_relaxed(partials + i).x;
      write_block_sum(v, out + 1);
    }
  }
}

// The bare stream by bulk copies (TMA's cp.async.bulk, no tensor map): S stages of one piece,
// each filled by 8 bulk copies that complete on the stage's mbarrier. The few-SM table runs
// it beside the cp.async stream, so its bound does not rest on one copy mechanism.
template <int S>
__global__ void __launch_bounds__(kThreads, 1) bulk_stream_kernel(const char* src, int per, int piece, float* out) {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  extern __shared__ __align__(1024) unsigned char sm[];
  __shared__ __align__(8) uint64_t full[S];
  const char* base = src + (int64_t)blockIdx.x * per * piece;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_u32(full + s)));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int chunk = piece / 8;  // a multiple of 16 bytes for every piece the probe uses
  auto issue = [&](int t) {
    if (threadIdx.x == 0 && t < per) {
      const uint32_t bar = smem_u32(full + t % S), d = smem_u32(sm + (t % S) * piece);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(piece) : "memory");
      for (int c = 0; c < 8; ++c)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                     ::"r"(d + c * chunk), "l"(base + (int64_t)t * piece + c * chunk), "r"(chunk), "r"(bar) : "memory");
    }
  };
  for (int t = 0; t < S; ++t) issue(t);
  float acc = 0.f;
  for (int t = 0; t < per; ++t) {
    asm volatile("{\n.reg .pred done;\nWAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n@!done bra WAIT_%=;\n}\n"
                 ::"r"(smem_u32(full + t % S)), "r"((t / S) & 1) : "memory");
    acc += reinterpret_cast<const float*>(sm + (t % S) * piece)[threadIdx.x];
    __syncthreads();
    issue(t + S);
  }
  if (acc == 12345.f) out[0] = acc;
}

// The second kernel of the shipped design's shape: one CTA, behind the stream, reads every
// split's 16-byte partial and writes the sum.
__global__ void __launch_bounds__(kThreads, 1) merge_kernel(const float4* partials, int n, float* out) {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  float v = 0.f;
  for (int i = threadIdx.x; i < n; i += kThreads) v += partials[i].x;
  write_block_sum(v, out + 2);
}

__global__ void read_flush_kernel(const float4* p, int64_t n, float* sink) {
  float acc = 0.f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float4 v = p[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 12345.f) sink[0] = acc;
}

__global__ void write_partials_kernel(float4* partials, int n) {  // the stream form's partials, for + 2nd kernel
  for (int i = threadIdx.x; i < n; i += blockDim.x) partials[i] = make_float4(1.f, 0.f, 0.f, 0.f);
}

struct Grid {
  const char* name;
  int ctas, per, piece;  // CTAs x per pieces of `piece` bytes = the 256 tiles
  int stages = 2;        // pieces in flight per CTA
};

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const int64_t region = (int64_t)kTiles * kTileBytes;
  const int kLaunches = 16;
  char* src;
  cudaMalloc(&src, region * kLaunches);
  cudaMemset(src, 1, region * kLaunches);
  const size_t flush_bytes = 512ull << 20;
  char* flush;
  cudaMalloc(&flush, flush_bytes);
  cudaMemset(flush, 0, flush_bytes);
  float4* partials;
  cudaMalloc(&partials, 4096 * sizeof(float4));
  cudaMemset(partials, 0, 4096 * sizeof(float4));
  unsigned* counters;  // one per grid shape: a counter only grows by its grid's size
  cudaMalloc(&counters, 64 * sizeof(unsigned));
  cudaMemset(counters, 0, 64 * sizeof(unsigned));
  float4* flagged;  // + flagged's records: cleared, then each launch's merger clears them again
  cudaMalloc(&flagged, 4096 * sizeof(float4));
  cudaMemset(flagged, 0, 4096 * sizeof(float4));
  float* out;
  cudaMalloc(&out, 16);
  cudaStream_t cs;
  cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (auto f : {(const void*)stream_kernel<kNone>, (const void*)stream_kernel<kSignal>, (const void*)stream_kernel<kReduce>,
                 (const void*)stream_kernel<kFlagged>})
    cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * kTileBytes);
  cudaFuncSetAttribute((const void*)stream_kernel<kNone, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, 3 * kTileBytes);
  cudaFuncSetAttribute((const void*)bulk_stream_kernel<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, 3 * kTileBytes);

  // copy ceiling, as the bench measures it
  double copy_gbps = 0;
  {
    const size_t n = 2ull << 30;
    char *x, *y;
    cudaMalloc(&x, n);
    cudaMalloc(&y, n);
    cudaMemset(x, 1, n);
    for (int s = 0; s < 8; ++s) {
      std::vector<float> ts;
      for (int r = 0; r < 10; ++r) {
        cudaEventRecord(a, cs);
        cudaMemcpyAsync(y, x, n, cudaMemcpyDeviceToDevice, cs);
        cudaEventRecord(b, cs);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        ts.push_back(ms);
      }
      copy_gbps = std::max(copy_gbps, 2.0 * n / (median(ts) * 1e-3) / 1e9);
    }
    cudaFree(x);
    cudaFree(y);
  }
  const double budget_us = kCaseBytes / (0.80 * copy_gbps * 1e3);

  // one launch of a form: the stream kernel with merge M on grid g, reading region r, plus the
  // second kernel when `second`
  auto launch = [&](const Grid& g, int m, bool second, int slot, int r) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(g.ctas);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = g.stages * g.piece;
    cfg.stream = cs;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const char* s = src + (int64_t)r * region;
    unsigned* c = counters + slot;
    if (m == kBulk) cudaLaunchKernelEx(&cfg, bulk_stream_kernel<3>, s, g.per, g.piece, out);
    if (m == kNone && g.stages == 3) cudaLaunchKernelEx(&cfg, stream_kernel<kNone, 3>, s, g.per, g.piece, partials, c, out);
    if (m == kNone && g.stages == 2) cudaLaunchKernelEx(&cfg, stream_kernel<kNone>, s, g.per, g.piece, partials, c, out);
    if (m == kSignal) cudaLaunchKernelEx(&cfg, stream_kernel<kSignal>, s, g.per, g.piece, partials, c, out);
    if (m == kReduce) cudaLaunchKernelEx(&cfg, stream_kernel<kReduce>, s, g.per, g.piece, partials, c, out);
    if (m == kFlagged) cudaLaunchKernelEx(&cfg, stream_kernel<kFlagged>, s, g.per, g.piece, flagged, c, out);
    if (second) {
      cudaLaunchConfig_t one = cfg;
      one.gridDim = dim3(1);
      one.dynamicSmemBytes = 0;
      cudaLaunchKernelEx(&one, merge_kernel, (const float4*)partials, g.ctas, out);
    }
  };
  auto flushed_us = [&](const Grid& g, int m, bool second, int slot) {
    std::vector<float> ts;
    for (int rep = 0; rep < 15; ++rep) {
      read_flush_kernel<<<sms * 8, 256, 0, cs>>>((const float4*)flush, flush_bytes / 16, out);
      cudaEventRecord(a, cs);
      launch(g, m, second, slot, 0);
      cudaEventRecord(b, cs);
      cudaEventSynchronize(b);
      float ms;
      cudaEventElapsedTime(&ms, a, b);
      if (rep >= 3) ts.push_back(ms);
    }
    return median(ts) * 1e3;
  };
  auto rotated_us = [&](const Grid& g, int m, bool second, int slot) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal);
    for (int l = 0; l < kLaunches; ++l) launch(g, m, second, slot, l);
    cudaStreamEndCapture(cs, &graph);
    cudaGraphInstantiate(&exec, graph, 0);
    std::vector<float> ts;
    for (int rep = 0; rep < 15; ++rep) {
      cudaGraphLaunch(exec, cs);
      cudaEventRecord(a, cs);
      cudaGraphLaunch(exec, cs);
      cudaEventRecord(b, cs);
      cudaEventSynchronize(b);
      float ms;
      cudaEventElapsedTime(&ms, a, b);
      if (rep >= 3) ts.push_back(ms);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return median(ts) * 1e3 / kLaunches;
  };

  // the 256 tiles as 128 CTAs x 2 tiles (one CTA per SM, as the shipped kernel), 256 x 2 half
  // tiles (up to three per SM by shared memory), 512 x 2 quarter tiles (up to eight)
  const Grid grids[] = {{"128 CTAs x 2 tiles", 128, 2, kTileBytes},
                        {"256 CTAs x 2 half tiles", 256, 2, kTileBytes / 2},
                        {"512 CTAs x 2 quarter tiles", 512, 2, kTileBytes / 4}};
  // every form on every grid: flushed and rotated µs
  const char* forms[] = {"stream", "+ signal", "+ merge", "+ flagged", "+ 2nd kernel"};
  // (the least of 3 passes over the whole table, so no cell is timed only while clocks ramp)
  double flushed[5][3], rotated[5][3];
  for (int pass = 0; pass < 3; ++pass)
    for (int f = 0; f < 5; ++f)
      for (int gi = 0; gi < 3; ++gi) {
        const Grid& g = grids[gi];
        const int m = f == 4 ? kNone : f;
        const bool second = f == 4;
        if (second) write_partials_kernel<<<1, 256, 0, cs>>>(partials, g.ctas);
        const int slot = f * 4 + gi;
        const double fl = flushed_us(g, m, second, slot), ro = rotated_us(g, m, second, slot);
        flushed[f][gi] = pass ? std::min(flushed[f][gi], fl) : fl;
        rotated[f][gi] = pass ? std::min(rotated[f][gi], ro) : ro;
      }
  const cudaError_t e = cudaDeviceSynchronize();
  auto of_copy = [&](double us) { return kCaseBytes / (us * 1e3) / copy_gbps; };
  printf("%s, %d SMs; copy ceiling %.0f GB/s (2 GiB D2D, read + written, best of 8)\n", prop.name, sms, copy_gbps);
  printf("target 1 at bs1 ctx16k: 0.80 of copy for %.0f bytes allows %.2f us per call\n\n", kCaseBytes, budget_us);
  printf("us per call (fraction of copy for the case's bytes)\n| form | timing |");
  for (const Grid& g : grids) printf(" %s |", g.name);
  printf("\n|---|---|---|---|---|\n");
  double need_f = 1e30, need_r = 1e30;  // the least of the forms that merge (+ merge, + flagged, + 2nd kernel)
  for (int f = 0; f < 5; ++f)
    for (int t = 0; t < 2; ++t) {
      printf("| %s | %s |", forms[f], t ? "rotated" : "flushed");
      for (int gi = 0; gi < 3; ++gi) {
        const double us = t ? rotated[f][gi] : flushed[f][gi];
        printf(" %.2f (%.3f) |", us, of_copy(us));
        if (f >= 2) (t ? need_r : need_f) = std::min(t ? need_r : need_f, us);
      }
      printf("\n");
    }
  // the bare stream from fewer SMs (three full tiles in flight per CTA): what a design that
  // does not spread a bs-1 request over the whole GPU (a cluster merging in distributed
  // shared memory, say) could read
  printf("\nstream from fewer SMs, us per call (fraction of copy); cp.async as above, bulk: 8 cp.async.bulk per tile\n"
         "| CTAs x tiles | cp.async flushed | cp.async rotated | bulk flushed | bulk rotated |\n|---|---|---|---|---|\n");
  for (int ctas : {16, 32, 64, 128}) {
    const Grid g{"few", ctas, kTiles / ctas, kTileBytes, 3};
    double fl = 1e30, ro = 1e30, bfl = 1e30, bro = 1e30;
    for (int pass = 0; pass < 3; ++pass) {
      fl = std::min(fl, flushed_us(g, kNone, false, 60)), ro = std::min(ro, rotated_us(g, kNone, false, 60));
      bfl = std::min(bfl, flushed_us(g, kBulk, false, 60)), bro = std::min(bro, rotated_us(g, kBulk, false, 60));
    }
    printf("| %d x %d | %.2f (%.3f) | %.2f (%.3f) | %.2f (%.3f) | %.2f (%.3f) |\n", ctas, kTiles / ctas, fl, of_copy(fl), ro,
           of_copy(ro), bfl, of_copy(bfl), bro, of_copy(bro));
  }
  printf("\nleast merged call: flushed %.2f us (%.3f of copy; %s the %.2f us budget), rotated %.2f us (%.3f; %s it)\n",
         need_f, of_copy(need_f), need_f > budget_us ? "over" : "within", budget_us, need_r, of_copy(need_r),
         need_r > budget_us ? "over" : "within");
  const cudaError_t e_all = e != cudaSuccess ? e : cudaDeviceSynchronize();
  printf("status: %s\n", cudaGetErrorString(e_all));
  return e_all == cudaSuccess ? 0 : 1;
}
