// The online softmax's running maximum in the rows kernel and the 16/32-row kernel (log2
// units): when it moves, O's accumulators are rescaled by 2^(old - new), one multiply per
// accumulator register (128 per thread in the rows kernel, on the path between a tile's
// softmax and its PV, where both warpgroups wait for it).
//
// raised_max() keeps the running maximum where it is unless a tile's row maximum exceeds it
// by more than kRescaleMargin. P = 2^(s - m) then reaches at most 2^kRescaleMargin instead
// of 1: bf16 P, the fp32 row sums and the fp32 accumulators hold it with the same relative
// precision (their exponents span far more), and every state written (m, l, O or the split's
// partial) stays consistent, since l and O are always relative to the m written with them.
// So O is rescaled only when a row's maximum rises that far: after a split's first tile on
// the bench's inputs never, on a tile whose scores jump (a draft tile aligned with its
// queries) still. Every warpgroup that shares rows applies the same rule to the same maxima,
// so they agree on m. -DKDTREE_EAGER_RESCALE: the maximum follows every rise (A/B). The
// seesaw kernel, whose rescales run under the other warpgroup's MMAs, keeps the eager maximum.
#pragma once

namespace kdtree {
namespace wgmma_path {

constexpr float kRescaleMargin = 8.f;  // log2 units: P <= 256

// The running maximum after a tile whose row maximum is `tile_max` (-inf: no visible score),
// from `m_run` (-inf before the first visible score, which always moves it).
__device__ __forceinline__ float raised_max(float m_run, float tile_max) {
#if defined(KDTREE_EAGER_RESCALE)
  return fmaxf(m_run, tile_max);
#else
  return tile_max > m_run + kRescaleMargin ? tile_max : m_run;
#endif
}

// Whether a warp rescales O's accumulators, given whether any of its rows' maxima moved.
// -DKDTREE_FAULT_NO_RESCALE (negative control): never, so a maximum raised past the margin
// after a tile with visible scores leaves the earlier tiles' weights 2^(new - old) too large.
__device__ __forceinline__ bool rescales(bool any_moved) {
#if defined(KDTREE_FAULT_NO_RESCALE)
  return false;
#else
  return any_moved;
#endif
}

}  // namespace wgmma_path
}  // namespace kdtree
