// The kernel library's compile switches: every -D name a build of these sources may pass, with
// its kind and what it changes. The shipped build defines none of them. kdtree/switches.py
// reads this table; a CPU test builds the library once per switch and fails on a KDTREE_ name
// tested by an #if in these sources that is not listed here.
//
// Kinds:
//   fault   a negative control: deliberately wrong; the gate requires every build of it to fail
//   format  fixes a choice the launch otherwise makes per call, so each choice is held to parity
//   ab      turns off (or replaces) one shipped optimisation, for same-run A/B timing
//           (kdtree-gate ab --against NAME=SWITCH)
#pragma once

// X(name, kind, what it changes)
#define KDTREE_SWITCHES(X)                                                                                       \
  X(KDTREE_FAULT_MASK_SHIFT, fault, "the tree mask is read one column off")                                       \
  X(KDTREE_FAULT_DROP_SPLIT, fault, "the first KV split never writes its partial state")                          \
  X(KDTREE_FAULT_NO_RESCALE, fault, "the wgmma kernels never rescale O when a row maximum rises")                  \
  X(KDTREE_FAULT_SHORT_LAYOUT_UNMARKED, fault, "the short layout leaves its unused splits unmarked")              \
  X(KDTREE_FAULT_BATCH_LAYOUT_UNMARKED, fault, "the batch layout leaves a request's unused slots unmarked")       \
  X(KDTREE_FAULT_GRID_LAYOUT_MERGES_ALL, fault, "the combine merges every slot of a batch that kept the grid")    \
  X(KDTREE_FAULT_PARTIAL_UNSCALED, fault, "fp16 partial chunks are stored at one fixed scale")                    \
  X(KDTREE_FAULT_CALL_FORMAT_IGNORED, fault, "the combine reads every partial state as fp16")                     \
  X(KDTREE_PARTIALS_FP16, format, "the rows kernel's split calls always write fp16 partial states")               \
  X(KDTREE_PARTIALS_FP32, format, "the rows kernel's split calls always write fp32 partial states")               \
  X(KDTREE_SERIAL_LAUNCH, ab, "ordinary launches instead of programmatic dependent ones")                         \
  X(KDTREE_MAIN_NO_TRIGGER, ab, "a main kernel never lets the combine launch before its epilogue")                \
  X(KDTREE_NO_EARLY_PREFETCH, ab, "no L2 prefetch of the request's indptr lines before the wait")                 \
  X(KDTREE_NO_BALANCE, ab, "batches get neither the batch layout nor the balanced grid")                          \
  X(KDTREE_NO_BATCH_LAYOUT, ab, "every batch keeps the grid's own layout and reads no lengths")                   \
  X(KDTREE_NO_SHORT_LAYOUT, ab, "one-request calls of 33-64 rows never take the short layout")                    \
  X(KDTREE_ROWS_SERIAL, ab, "no seesaw kernel: every 64-row CTA runs tile after tile")                            \
  X(KDTREE_SEESAW_ROWS_ONLY, ab, "the seesaw kernel from 256 rows at every batch size")                           \
  X(KDTREE_ROWS_NO_COPIER, ab, "the rows kernel never runs its copying warpgroup")                                \
  X(KDTREE_ROW_MAX_EVERY_TILE, ab, "the rows kernel exchanges row maxima on every tile")                          \
  X(KDTREE_EAGER_RESCALE, ab, "the running maximum moves on every rise (no rescale margin)")                      \
  X(KDTREE_COMBINE_CHUNKS_ONLY, ab, "the combine never uses its row kernel")                                      \
  X(KDTREE_COMBINE_LOOKUP_AFTER_WAIT, ab, "the combine looks up its request only after the wait")
