"""Deliberately broken kernels: the negative controls that prove the kernel and graph
layers can fail. Each is a candidate for ``--kernel kdgate.broken_kernels:NAME``.

* ``mask_shift``    the shipped kernel built with KDTREE_FAULT_MASK_SHIFT: reads the tree
                    mask one column off (an off-by-one in the mask index).
* ``drop_split``    built with KDTREE_FAULT_DROP_SPLIT: the first KV split never writes its
                    partial result (the combine reads stale workspace).
* ``short_layout_unmarked`` built with KDTREE_FAULT_SHORT_LAYOUT_UNMARKED: a short one-request
                    call in the short layout leaves the grid's splits past its own unmarked
                    (the combine then merges whatever an earlier call left there).
* ``batch_layout_unmarked`` built with KDTREE_FAULT_BATCH_LAYOUT_UNMARKED: a batch in the
                    batch layout leaves the workspace slots past a request's pieces unmarked
                    (the combine then merges whatever an earlier call left there).
* ``grid_layout_merges_all`` built with KDTREE_FAULT_GRID_LAYOUT_MERGES_ALL: the combine of a
                    batch that kept the grid's own layout merges every workspace slot, also
                    those past the grid's splits that an earlier call left.
* ``no_rescale``    built with KDTREE_FAULT_NO_RESCALE: the rows and 16/32-row kernels never
                    rescale O's accumulators when a row's running maximum moves (it moves only
                    past a margin, kernels/csrc/wgmma/running_max.cuh).
* ``partial_unscaled`` built with KDTREE_FAULT_PARTIAL_UNSCALED: in a call that takes fp16
                    partial states (a rows-kernel call past the format threshold, split_plan.h),
                    every 128-column chunk of a split's partial row is stored at one fixed
                    scale (2^0), not at its own power of two: large values overflow, small
                    ones flush to zero.
* ``call_format_ignored`` built with KDTREE_FAULT_CALL_FORMAT_IGNORED: the combine's fp16
                    build reads every partial value as fp16, also from a one-request call the
                    rows kernel ran in the short layout, which writes fp32 (split_plan.h).
* ``stale_lengths`` the shipped kernel, but under CUDA-graph capture it reads a copy of
                    the request lengths (kv_indptr) taken at the last eager call, as a kernel
                    that bakes per-step data into the graph would: eager runs are right,
                    replays with new lengths read stale ones.
"""

from __future__ import annotations

import torch

from kdgate.shipped_builds import build_with


mask_shift = build_with(("KDTREE_FAULT_MASK_SHIFT",))
drop_split = build_with(("KDTREE_FAULT_DROP_SPLIT",))
short_layout_unmarked = build_with(("KDTREE_FAULT_SHORT_LAYOUT_UNMARKED",))
batch_layout_unmarked = build_with(("KDTREE_FAULT_BATCH_LAYOUT_UNMARKED",))
grid_layout_merges_all = build_with(("KDTREE_FAULT_GRID_LAYOUT_MERGES_ALL",))
no_rescale = build_with(("KDTREE_FAULT_NO_RESCALE",))
partial_unscaled = build_with(("KDTREE_FAULT_PARTIAL_UNSCALED",))
call_format_ignored = build_with(("KDTREE_FAULT_CALL_FORMAT_IGNORED",))

_STALE: dict[tuple, torch.Tensor] = {}


def stale_lengths(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr,
                  kv_indptr, *rest, **kwargs):
    from kdtree.verify_op import tree_verify_fwd

    key = (tuple(q_extend.shape), kv_indptr.shape[0], kv_indptr.dtype)
    if torch.cuda.is_current_stream_capturing():
        lengths = _STALE[key]
    else:
        _STALE[key] = kv_indptr.clone()
        lengths = kv_indptr
    return tree_verify_fwd(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer,
                           qo_indptr, lengths, *rest, **kwargs)


stale_lengths.writes_lse = True
stale_lengths.static_checks = True
