// Split scheduling over the KV length. The number of splits is chosen on the host from
// static sizes only (batch, heads, draft width, SM count), so a captured CUDA graph
// stays valid for any lengths; each CTA derives its own KV range from the request's
// length in device memory.
#pragma once
#include <cstdint>

namespace kdtree {

constexpr int kBlockM = 32;   // query rows (draft token x head) per CTA
constexpr int kBlockN = 32;   // KV positions per tile
constexpr int kMaxSplits = 32;

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Splits per request: enough CTAs for about two waves, at most kMaxSplits, and no more
// than the workspace budget allows.
inline int64_t choose_num_splits(int64_t bs, int64_t row_blocks, int64_t total_rows,
                                 int64_t num_sms, int64_t workspace_budget_bytes) {
  int64_t ctas = bs * row_blocks;
  int64_t splits = ceil_div(2 * num_sms, ctas > 0 ? ctas : 1);
  if (splits > kMaxSplits) splits = kMaxSplits;
  int64_t per_split = total_rows * (512 + 2) * 4;
  while (splits > 1 && splits * per_split > workspace_budget_bytes) --splits;
  return splits < 1 ? 1 : splits;
}

// KV positions [begin, end) of split `split` for a request of `length` positions: equal
// chunks rounded up to whole tiles, so every split starts on a tile boundary.
__host__ __device__ inline void split_range(int64_t length, int64_t num_splits, int64_t split,
                                            int64_t* begin, int64_t* end) {
  int64_t chunk = ceil_div(ceil_div(length, num_splits), kBlockN) * kBlockN;
  int64_t b = split * chunk;
  int64_t e = b + chunk;
  *begin = b < length ? b : length;
  *end = e < length ? e : length;
}

}  // namespace kdtree
