// Entry i of an index array whose entries are int32 or int64 (`is_64`), as int64: the
// indptrs' reader for every kernel, the combine and the batch layout's plan.
#pragma once
#include <cstdint>

namespace kdtree {

__device__ __forceinline__ int64_t load_index(const void* p, int64_t is_64, int64_t i) {
  return is_64 ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
}

}  // namespace kdtree
