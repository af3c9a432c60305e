// Deterministic combine of the per-split partial states, in one of two kernels. Many rows and
// few splits (combine_by_rows()): the row kernel, one warp merges a whole query row, each lane
// 4 columns of each of the row's 4 chunks, two splits' loads in flight together, so the owner
// lookup and the (m, l) loads are done once per row. Otherwise the chunk kernel: a unit of
// work is one query row's 128-column chunk; a group of 1, 2, 4 or 8 warps merges it (warp m
// of the group: splits m, m + G, ..., at most 24, in batches of 8 loads), each warp against
// its own maximum, then the group's first warp rescales and adds the warps' sums in warp
// order. Either way each
// output is rounded to bf16 once, and a row's splits are added in split order. Splits that
// saw nothing (m = -inf) weigh 0 and their partial output, never written, is not read.
// Weights are exact log2-domain exponentials; in a call with fp16 partials
// (common/partial_format.cuh) a value is brought back to its fp32 value by its chunk's power
// of two (exactly) before it is weighed; an fp16 build reads fp32 values from a call whose main
// kernel recorded that it wrote them (call_wrote_fp32()). Both kernels read what decides whether they
// compute a row (qo_indptr) before they wait for the main kernel (TokenOwner); a batch that
// kept the grid's own layout has fewer live slots than the workspace, which the main kernel
// records in p.layout_flag (merged_slot()).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

#include "common/grid_dependency.cuh"
#include "common/partial_format.cuh"
#include "common/request_extent.cuh"
#include "common/row_result.cuh"
#include "split_plan.h"
#include "verify_params.h"

namespace kdtree {

constexpr int kCombineWarps = 8;
constexpr int kCombineChunks = 4;  // 512 columns = 4 chunks x 32 lanes x float4
constexpr int kCombinePerWarp = 24;  // splits one warp merges at most (three batches)
constexpr int kCombineBatch = 8;     // loads per lane issued together
static_assert(kMaxSplitsTiled <= kCombineWarps * kCombinePerWarp && kMaxSplits <= kCombineWarps * kCombinePerWarp,
              "8 warps of 24 splits cover every split count the plans choose");

// Chunk kernel: warps per unit for `num_splits` splits: the fewest of 1, 2, 4, 8 that leave
// each warp at most 8 splits, else 8 (at most 24 each).
__host__ __device__ inline int combine_group_warps(int64_t num_splits) {
  int g = 1;
  while (g < kCombineWarps && num_splits > 8 * g) g *= 2;
  return g;
}

// CTAs of the chunk kernel for `rows` query rows (T x H) and `num_splits` splits.
__host__ __device__ inline int64_t combine_chunk_ctas(int64_t rows, int64_t num_splits) {
  return ceil_div(rows * kCombineChunks, kCombineWarps / combine_group_warps(num_splits));
}

// CTAs per SM the chunk kernel is built for: 4 (every load of a batch in flight) when its
// grid of `ctas` fits one wave of them on `num_sms` SMs, else 8 (the most CTAs per wave).
inline int combine_ctas_per_sm(int64_t ctas, int64_t num_sms) { return ctas <= 4 * num_sms ? 4 : 8; }

// The row kernel takes the merge where the chunk kernel would fall to its 8-per-SM build
// (more than one wave of 4 per SM: 1,057 rows and more on 132 SMs) and the splits are at most
// kCombineRowSplits; below one wave the chunk kernel keeps all its loads in flight and stays
// (docs/perf.md gives the measured split). -DKDTREE_COMBINE_CHUNKS_ONLY: the chunk kernel
// always (A/B).
constexpr int kCombineRowSplits = 8;
// Both kernels are shaped by the grid's splits per request (p.base_splits); a batch's
// workspace has up to kBatchSlotsFactor times as many slots (split_plan.h), and these fit the
// same warps: up to 8 grid splits per chunk-kernel warp (of its 24 lanes), up to
// kCombineRowSplits per row-kernel warp (of 32).
static_assert(kBatchSlotsFactor * 8 <= kCombinePerWarp && kBatchSlotsFactor * kCombineRowSplits <= 32,
              "a batch's slots fit the warps its grid splits are given");
__host__ __device__ inline bool combine_by_rows(int64_t rows, int64_t num_splits, int64_t num_sms) {
#if defined(KDTREE_COMBINE_CHUNKS_ONLY)
  return false;
#else
  return num_splits <= kCombineRowSplits && combine_chunk_ctas(rows, num_splits) > 4 * num_sms;
#endif
}

// CTAs of the combine: one warp per row (row kernel), else combine_chunk_ctas().
__host__ __device__ inline int64_t combine_ctas(int64_t rows, int64_t num_splits, bool by_rows) {
  return by_rows ? ceil_div(rows, kCombineWarps) : combine_chunk_ctas(rows, num_splits);
}

// How the combine of `rows` query rows (T x H) and `num_splits` splits launches on `num_sms`
// SMs: which kernel (the row kernel, or the chunk kernel's build for `ctas_per_sm`), its
// CTAs, and the warps that merge one query row (1 in the row kernel).
struct CombineLaunch {
  bool by_rows;
  int64_t ctas;
  int ctas_per_sm;
  int warps_per_row;
};
inline CombineLaunch combine_launch(int64_t rows, int64_t num_splits, int64_t num_sms) {
  CombineLaunch c;
  c.by_rows = combine_by_rows(rows, num_splits, num_sms);
  c.ctas = combine_ctas(rows, num_splits, c.by_rows);
  c.ctas_per_sm = c.by_rows ? 4 : combine_ctas_per_sm(c.ctas, num_sms);
  c.warps_per_row = c.by_rows ? 1 : kCombineChunks * combine_group_warps(num_splits);
  return c;
}

// Entry i of qo_indptr (int32 or int64).
__device__ __forceinline__ int64_t qo_entry(const VerifyParams& p, int64_t i) {
  return load_index(p.qo_indptr, p.qo_is_64, i);
}

// Whether token t is one of the computed rows of the request whose tokens are [start, end):
// inside it and among its first max_len_extend (n_max) tokens.
__device__ __forceinline__ bool computed_token(const VerifyParams& p, int64_t t, int64_t start, int64_t end) {
  return t >= start && t < end && t - start < p.n_max;
}

// The request that owns token t (binary search in qo_indptr), or -1 when t belongs to no
// request or lies past its request's max_len_extend rows (never computed).
__device__ __forceinline__ int64_t owning_request(const VerifyParams& p, int64_t t) {
  if (t < qo_entry(p, 0) || t >= qo_entry(p, p.bs)) return -1;
  int64_t lo = 0, hi = p.bs;  // entry lo <= t < entry hi
  while (hi - lo > 1) {
    int64_t mid = (lo + hi) / 2;
    if (qo_entry(p, mid) <= t) lo = mid; else hi = mid;
  }
  return computed_token(p, t, qo_entry(p, lo), qo_entry(p, lo + 1)) ? lo : -1;
}

// Whether a combine computes token t: owning_request() in two halves around the combine's
// wait for its main kernel (wait_for_prior_grids()). begin_then_wait() reads what decides it
// and then waits: qo_indptr is a call input, written before the main kernel started, and a
// combine launches only once every CTA of its main kernel has passed that kernel's own wait
// (grid_dependency.cuh). At bs 1 it only issues the loads of entries 0 and 1, as 32-bit
// words in the same asm statement as the wait, so nothing uses them before it and their
// round trip overlaps it; computed() forms and compares them after. A batch's binary search
// runs before the wait. -DKDTREE_COMBINE_LOOKUP_AFTER_WAIT: the lookup after the wait (A/B).
struct TokenOwner {
  uint32_t start_lo, start_hi, end_lo, end_hi;  // bs 1: entries 0 and 1 as 32-bit words
  bool owned;                                   // a batch: owning_request() found an owner
  __device__ __forceinline__ void begin_then_wait(const VerifyParams& p, int64_t t, bool row) {
    start_lo = start_hi = end_lo = end_hi = 0;
    owned = false;
#if defined(KDTREE_COMBINE_LOOKUP_AFTER_WAIT)
    wait_for_prior_grids();  // computed() looks the owner up
#else  // griddepcontrol exists from sm_90 on; the compute_80 PTX only loads (no dependent launch there)
    if (p.bs == 1) {
      const char* entry0 = static_cast<const char*>(p.qo_indptr);
      const char* entry1 = entry0 + (p.qo_is_64 ? 8 : 4);
      asm volatile(
          "{\n\t.reg .pred wide;\n\t"
          "setp.ne.u32 wide, %4, 0;\n\t"
          "ld.global.b32 %0, [%5];\n\t"
          "ld.global.b32 %2, [%6];\n\t"
          "@wide ld.global.b32 %1, [%5 + 4];\n\t"
          "@wide ld.global.b32 %3, [%6 + 4];\n\t"
          KDTREE_GRID_WAIT_ASM "}\n"
          : "=r"(start_lo), "+r"(start_hi), "=r"(end_lo), "+r"(end_hi)
          : "r"(static_cast<uint32_t>(p.qo_is_64 != 0)), "l"(entry0), "l"(entry1)
          : "memory");
    } else {
      owned = row && owning_request(p, t) >= 0;
      wait_for_prior_grids();
    }
#endif
  }
  __device__ __forceinline__ bool computed(const VerifyParams& p, int64_t t) const {
#if defined(KDTREE_COMBINE_LOOKUP_AFTER_WAIT)
    return owning_request(p, t) >= 0;
#else
    if (p.bs == 1) {
      const bool wide = p.qo_is_64;
      const int64_t start = wide ? static_cast<int64_t>((static_cast<uint64_t>(start_hi) << 32) | start_lo)
                                 : static_cast<int64_t>(static_cast<int32_t>(start_lo));
      const int64_t end = wide ? static_cast<int64_t>((static_cast<uint64_t>(end_hi) << 32) | end_lo)
                               : static_cast<int64_t>(static_cast<int32_t>(end_lo));
      return computed_token(p, t, start, end);
    }
    return owned;
#endif
  }
};

// One warp's splits weighed against their maximum. Lane i holds split i's (m_i, l_i) (log2
// units; m_i = -inf for a split that saw nothing, or a lane with no split). `m`: the warp's
// maximum m_i; `w_lane`: this lane's weight 2^(m_i - m), 0 for a dead split; `total`: the sum
// of w_i l_i over the warp; `live`: the lanes whose split saw something.
struct SplitWeights {
  float m, w_lane, total;
  unsigned live;
};
__device__ __forceinline__ SplitWeights split_weights(float m_lane, float l_lane) {
  SplitWeights s;
  s.m = m_lane;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s.m = fmaxf(s.m, __shfl_xor_sync(0xffffffffu, s.m, off));
  const bool live_lane = m_lane != -INFINITY;
  s.w_lane = live_lane ? exp2f(m_lane - s.m) : 0.f;
  s.total = s.w_lane * l_lane;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s.total += __shfl_xor_sync(0xffffffffu, s.total, off);
  s.live = __ballot_sync(0xffffffffu, live_lane);
  return s;
}

// 2^e of chunk `chunk` of a partial row from its packed exponents (verify_params.h: one signed
// byte per chunk, in [-114, 113]).
__device__ __forceinline__ float chunk_scale(uint32_t exponents, int chunk) {
  return exp2_int(static_cast<int8_t>(exponents >> (8 * chunk)));
}

// A split's scalars for one query row (verify_params.h) at `scalars`: m, l and, with fp16
// values, the packed chunk exponents (one 16-byte load; fp32 values: m and l only).
template <bool kFp16>
__device__ __forceinline__ void load_split_scalars(const float* scalars, float* m, float* l, uint32_t* exponents) {
  if constexpr (kFp16) {
    const float4 ml = *reinterpret_cast<const float4*>(scalars);
    *m = ml.x;
    *l = ml.y;
    *exponents = __float_as_uint(ml.z);
  } else {
    const float2 ml = *reinterpret_cast<const float2*>(scalars);
    *m = ml.x;
    *l = ml.y;
  }
}

// Four consecutive values of a partial row in either format (verify_params.h): Value, the
// type of one; Bits, of the four as loaded; add(): acc += w * x for them (with fp16 values, w
// is the split's weight times its chunk's scale, chunk_scale(): a power of two, so the product
// is exact and x is weighed as the fp32 value it stands for).
template <bool kFp16>
struct PartialQuad;

template <>
struct PartialQuad<false> {
  using Value = float;
  using Bits = float4;
  static __device__ __forceinline__ Bits zero() { return make_float4(0.f, 0.f, 0.f, 0.f); }
  static __device__ __forceinline__ void add(float4* acc, float w, Bits v) {
    acc->x += w * v.x;
    acc->y += w * v.y;
    acc->z += w * v.z;
    acc->w += w * v.w;
  }
};

template <>
struct PartialQuad<true> {
  using Value = __half;
  using Bits = uint2;
  static __device__ __forceinline__ Bits zero() { return make_uint2(0u, 0u); }
  static __device__ __forceinline__ void add(float4* acc, float w, Bits v) {
    const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&v.x));
    const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&v.y));
    acc->x += w * lo.x;
    acc->y += w * lo.y;
    acc->z += w * hi.x;
    acc->w += w * hi.y;
  }
};

// The chunk kernel's warp: acc += w_i x_i over its live splits i (bit i of `live`; lane i
// holds w_i in `w_lane`, 0 for a dead split), split i's four values at element `first` + i
// `step` of ws_acc, in batches of kCombineBatch loads.
template <bool kFp16>
__device__ __forceinline__ void add_warp_splits(float4* acc, const VerifyParams& p, int64_t first, int64_t step,
                                                unsigned live, float w_lane) {
  using Quad = PartialQuad<kFp16>;
  const typename Quad::Value* src = static_cast<const typename Quad::Value*>(p.ws_acc) + first;
  for (int i0 = 0; i0 < kCombinePerWarp && (live >> i0); i0 += kCombineBatch, src += kCombineBatch * step) {
    typename Quad::Bits v[kCombineBatch];
#pragma unroll
    for (int u = 0; u < kCombineBatch; ++u)  // a dead split's load is predicated off
      v[u] = (live >> (i0 + u)) & 1u ? *reinterpret_cast<const typename Quad::Bits*>(src + u * step) : Quad::zero();
#pragma unroll
    for (int u = 0; u < kCombineBatch; ++u) Quad::add(acc, __shfl_sync(0xffffffffu, w_lane, i0 + u), v[u]);
  }
}

// The row kernel's warp: acc[c] += w_i x_i over its live splits i, chunk c's four values of
// split i at element `first` + i `split_stride` + 128 c, two splits at a time; lane i holds
// w_i (`w_lane`, 0 for a dead split) and, with fp16 values, split i's packed exponents.
template <bool kFp16>
__device__ __forceinline__ void add_row_splits(float4* acc, const VerifyParams& p, int64_t first,
                                               int64_t split_stride, unsigned live, float w_lane,
                                               uint32_t exponents) {
  using Quad = PartialQuad<kFp16>;
  const typename Quad::Value* src = static_cast<const typename Quad::Value*>(p.ws_acc) + first;
  for (int i0 = 0; i0 < kBatchSlotsFactor * kCombineRowSplits && (live >> i0); i0 += 2) {
    typename Quad::Bits v[2][kCombineChunks];
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int c = 0; c < kCombineChunks; ++c)  // a dead split's loads are predicated off
        v[u][c] = (live >> (i0 + u)) & 1u
                      ? *reinterpret_cast<const typename Quad::Bits*>(src + (i0 + u) * split_stride + c * 128)
                      : Quad::zero();
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const float w = __shfl_sync(0xffffffffu, w_lane, i0 + u);  // 0 for a dead split
      const uint32_t split_exponents = kFp16 ? __shfl_sync(0xffffffffu, exponents, i0 + u) : 0u;
#pragma unroll
      for (int c = 0; c < kCombineChunks; ++c)
        Quad::add(&acc[c], kFp16 ? w * chunk_scale(split_exponents, c) : w, v[u][c]);
    }
  }
}

// Two register budgets of one kernel (combine_ctas_per_sm picks one): at 4 CTAs per SM (63
// registers) a batch's 8 float4 loads are all in flight; at 8 CTAs per SM (32 registers)
// ptxas issues them one at a time, but twice the CTAs fit in one wave.
template <int kCtasPerSm, int kPartials>  // the main kernel's build (split_plan.h: PartialBuild)
__global__ void __launch_bounds__(kCombineWarps * 32, kCtasPerSm)
verify_combine_kernel(const VerifyParams p) {
  __shared__ float4 part[kCombineWarps][32];
  __shared__ float part_m[kCombineWarps], part_l[kCombineWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group_warps = combine_group_warps(p.base_splits);  // the launch's shape (verify_api.cu)
  const int member = warp % group_warps;
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * (kCombineWarps / group_warps) + warp / group_warps;
  const int64_t stride = p.total_tokens * p.heads;
  const int64_t flat = unit / kCombineChunks;  // t * H + h
  const int chunk = static_cast<int>(unit % kCombineChunks);
  // lane i < 24: this warp's i-th split (member + G i)
  const int64_t my_split = member + static_cast<int64_t>(group_warps) * lane;
  const int64_t t = flat / p.heads, h = flat % p.heads;
  TokenOwner owner;
  owner.begin_then_wait(p, t, flat < stride);  // before reading what the main kernel wrote
  allow_dependent_grids();  // the next call's main kernel may be launched (it waits too)
  const int layout = has_batch_layout(p) ? *p.layout_flag : 1;  // loaded with the (m, l) below
  constexpr bool kFp16 = kPartials != kPartialsFp32;
  const bool fp16_values = kPartials == kPartialsFp16 || (kFp16 && !call_wrote_fp32(p));  // likewise
  float ms = -INFINITY, ls = 0.f;
  uint32_t exponents = 0;
  if (flat < stride && lane < kCombinePerWarp && my_split < p.num_splits)
    load_split_scalars<kFp16>(p.ws_ml + (my_split * stride + flat) * kPartialScalars, &ms, &ls, &exponents);
  if (!merged_slot(p, layout, my_split)) {  // a slot this call did not write: weight 0
    ms = -INFINITY;
    ls = 0.f;
  }
  // the same for every warp of a group: a unit past the rows, or a row no request owns
  const bool active = flat < stride && owner.computed(p, t);

  // this warp's splits' weights against the warp's maximum
  float m_warp = -INFINITY, l_warp = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (active) {
    const SplitWeights sw = split_weights(ms, ls);
    m_warp = sw.m;
    l_warp = sw.total;
    const float w_lane = sw.w_lane;
    const unsigned live = sw.live;
    const int64_t split_stride = stride * kValueDim;  // values between two splits' partials
    const int64_t first = member * split_stride + flat * kValueDim + chunk * 128 + 4 * lane;
    const int64_t step = group_warps * split_stride;    // between this warp's splits
    // with fp16 values, this lane's split's weight times its scale for the chunk (0 for a dead
    // split, whose exponents are not read)
    if (fp16_values)
      add_warp_splits<true>(&acc, p, first, step, live,
                            (live >> lane) & 1u ? w_lane * chunk_scale(exponents, chunk) : 0.f);
    else
      add_warp_splits<false>(&acc, p, first, step, live, w_lane);
  }
  float m = m_warp, total = l_warp;
  float4 sum = acc;
  if (group_warps > 1) {  // the group's warps meet in shared memory; its first warp adds them in order
    part[warp][lane] = acc;
    if (lane == 0) {
      part_m[warp] = m_warp;
      part_l[warp] = l_warp;
    }
    __syncthreads();
    if (member != 0) return;
    m = -INFINITY;
    for (int w = warp; w < warp + group_warps; ++w) m = fmaxf(m, part_m[w]);
    sum = make_float4(0.f, 0.f, 0.f, 0.f);
    total = 0.f;
    for (int w = warp; w < warp + group_warps; ++w) {
      if (part_m[w] == -INFINITY) continue;
      const float f = exp2f(part_m[w] - m);
      sum.x += f * part[w][lane].x;
      sum.y += f * part[w][lane].y;
      sum.z += f * part[w][lane].z;
      sum.w += f * part[w][lane].w;
      total += f * part_l[w];
    }
  }
  if (!active) return;
  const float inv = total > 0.f ? 1.f / total : 0.f;
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.o) + t * p.o_stride_t + h * p.o_stride_h +
                       chunk * 128 + 4 * lane;
  *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(sum.x * inv, sum.y * inv);
  *reinterpret_cast<__nv_bfloat162*>(out + 2) = __floats2bfloat162_rn(sum.z * inv, sum.w * inv);
  if (p.lse && chunk == 0 && lane == 0)
    p.lse[t * p.lse_stride_t + h] = natural_lse(m, total);
}

// The row kernel (combine_by_rows()): warp w of CTA c merges query row 8 c + w; lane i holds
// split i's (m, l) (i < num_splits <= kBatchSlotsFactor x kCombineRowSplits) and loads, for
// each live split in order, columns 4 i .. 4 i + 3 of each of the row's 4 chunks (4 float4),
// two splits at a time. Built for 4 CTAs per SM.
template <int kPartials>  // the main kernel's build (split_plan.h: PartialBuild)
__global__ void __launch_bounds__(kCombineWarps * 32, 4)
verify_combine_rows_kernel(const VerifyParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t stride = p.total_tokens * p.heads;
  const int64_t flat = static_cast<int64_t>(blockIdx.x) * kCombineWarps + warp;  // t * H + h
  const int64_t t = flat / p.heads, h = flat % p.heads;
  TokenOwner owner;
  owner.begin_then_wait(p, t, flat < stride);  // before reading what the main kernel wrote
  allow_dependent_grids();  // the next call's main kernel may be launched (it waits too)
  if (flat >= stride) return;  // warp-uniform; this kernel has no CTA barrier
  const int layout = has_batch_layout(p) ? *p.layout_flag : 1;  // loaded with the (m, l) below
  constexpr bool kFp16 = kPartials != kPartialsFp32;
  const bool fp16_values = kPartials == kPartialsFp16 || (kFp16 && !call_wrote_fp32(p));  // likewise
  float ms = -INFINITY, ls = 0.f;
  uint32_t exponents = 0;
  if (lane < p.num_splits)  // loaded before the owner is known (in flight together)
    load_split_scalars<kFp16>(p.ws_ml + (lane * stride + flat) * kPartialScalars, &ms, &ls, &exponents);
  if (!merged_slot(p, layout, lane)) {  // a slot this call did not write: weight 0
    ms = -INFINITY;
    ls = 0.f;
  }
  if (!owner.computed(p, t)) return;  // a row no request owns (warp-uniform)

  const SplitWeights sw = split_weights(ms, ls);
  const float m = sw.m, total = sw.total, w_lane = sw.w_lane;
  const unsigned live = sw.live;
  if (!((live >> lane) & 1u)) exponents = 0;  // a dead split's exponents are not read: scale 1
  const int64_t split_stride = stride * kValueDim;  // values between two splits' partials
  float4 acc[kCombineChunks];
#pragma unroll
  for (int c = 0; c < kCombineChunks; ++c) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (fp16_values)
    add_row_splits<true>(acc, p, flat * kValueDim + 4 * lane, split_stride, live, w_lane, exponents);
  else
    add_row_splits<false>(acc, p, flat * kValueDim + 4 * lane, split_stride, live, w_lane, exponents);
  const float inv = total > 0.f ? 1.f / total : 0.f;
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.o) + t * p.o_stride_t + h * p.o_stride_h + 4 * lane;
#pragma unroll
  for (int c = 0; c < kCombineChunks; ++c) {
    *reinterpret_cast<__nv_bfloat162*>(out + c * 128) = __floats2bfloat162_rn(acc[c].x * inv, acc[c].y * inv);
    *reinterpret_cast<__nv_bfloat162*>(out + c * 128 + 2) = __floats2bfloat162_rn(acc[c].z * inv, acc[c].w * inv);
  }
  if (p.lse && lane == 0)
    p.lse[t * p.lse_stride_t + h] = natural_lse(m, total);
}

}  // namespace kdtree
