// The one plain struct the host hands to the device (by value). Every member is a pointer,
// an int64_t or a double (8 bytes wide, no padding): the host's ctypes mirror is read from
// this declaration (kernels/kdtree/params_mirror.py), so a member of another type is refused.
#pragma once
#include <cstdint>

namespace kdtree {

constexpr int kHeadDim = 576;   // the contract's q/k width: 512 latent dims + 64 rope dims
constexpr int kValueDim = 512;  // v = the first 512 dims of a key row
constexpr int kMaxDraft = 64;   // draft tokens per request at most (max_len_extend)
constexpr int64_t kMaxHeads = 1 << 20;  // query heads per rank at most (keeps rows below 2^32)

// A split's partial state per query row (common/row_result.cuh), in one of two formats (the
// build a call launches is chosen from static sizes, split_plan.h: partials_fp16()): kValueDim
// fp32 values in ws_acc, or kValueDim fp16 values, each 128-column chunk at a power of two of its own; and
// kPartialScalars 32-bit words in ws_ml: m (log2 units), l, and with fp16 values the four
// chunks' exponents (one signed byte each; a value stored as x stands for x * 2^exponent).
constexpr int kPartialChunks = kValueDim / 128;
constexpr int kPartialScalars = 4;  // m, l, the chunk exponents (fp16 values), one unused word
constexpr int64_t kPartialRowBytes = kValueDim * 4 + kPartialScalars * 4;  // workspace per row per slot (fp32 values)

struct VerifyParams {
  // device pointers
  const void* q;            // [T, H, 576] bf16
  const void* k_extend;     // [T, 1, 576] bf16: the draft tokens' K
  const void* v_extend;     // [T, 1, 512] bf16: the draft tokens' V
  const void* k_buffer;     // [S, 1, 576] bf16: token-major KV cache; V = first 512 dims
  void* o;                  // [T, H, 512] bf16 (written)
  float* lse;               // [T, H] fp32 natural-log sum-exp of the scaled scores, or null
  const void* qo_indptr;    // [bs+1] int32 or int64
  const void* kv_indptr;    // [bs+1] int32 or int64
  const int64_t* kv_indices;  // prefix slots
  const uint8_t* mask;      // flat tree mask (bool or uint8, tested != 0), or null: causal
  const int64_t* mask_indptr; // [bs+1] int64 (null when mask is null)
  void* ws_acc;             // [splits, T, H, 512] partial outputs (splits > 1): fp32, or fp16 scaled per
                            // 128-column chunk (split_plan.h: partials_fp16())
  float* ws_ml;             // [splits, T, H, kPartialScalars]: m (log2 units), l, the chunks' exponents
  int* error_flag;          // debug mode: bit set per kind of bad index seen (see below)
  int* layout_flag;         // from a call's main kernel to its combine: a batch's layout, 1 in the
                            // batch layout, 0 in the grid's own (common/request_extent.cuh); in a
                            // one-request call of an fp16 build, 1 when it wrote fp32 values
                            // after all (common/partial_format.cuh)
  // strides in elements
  int64_t q_stride_t, q_stride_h;
  int64_t ke_stride_t, ve_stride_t, kb_stride;
  int64_t o_stride_t, o_stride_h, lse_stride_t;
  // bounds: every data-dependent read is clamped to these (no out-of-bounds read, ever)
  int64_t kv_buffer_rows;   // S
  int64_t kv_indices_len;
  int64_t mask_len;
  // static sizes
  int64_t qo_is_64, kv_is_64;
  int64_t bs, heads, n_max, total_tokens;
  int64_t num_splits, row_blocks;
  int64_t base_splits;      // splits per request of an equal-length batch (< num_splits: the
                            // grid's extra splits balance unequal lengths, split_plan.h)
  int64_t debug_checks;
  int64_t causal;           // is_causal: a draft never sees a later draft, whatever the mask says
  int64_t path;             // KernelPath (split_plan.h): portable, tiled 32 rows, tiled 64 rows
  double scale_log2;        // sm_scale * log2(e)
};

// error_flag bits (debug mode)
enum VerifyError : int {
  kSlotOutOfRange = 1,      // kv_indices value outside [0, S)
  kIndicesTooShort = 2,     // kv_indptr points past kv_indices
  kMaskTooShort = 4,        // mask_indptr/lengths point past the mask
  kBadQoLength = 8,         // a request with < 0 or > max_len_extend draft tokens
  kBadKvLength = 16,        // a request with a negative prefix length
  kTokensOutOfRange = 32,   // qo_indptr points past T
};

}  // namespace kdtree
