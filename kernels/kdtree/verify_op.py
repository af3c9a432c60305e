"""The verify-attention kernel as a torch op, with SGLang's ``extend_attention_fwd`` form.

:func:`tree_verify_fwd` takes exactly the arguments SGLang 0.5.23's MLA target-verify
path passes to ``extend_attention_fwd`` and writes ``o_extend`` (and ``lse_extend``).
Argument checks are static (shapes, dtypes, devices, strides) and raise TypeError or
ValueError naming the argument before anything is launched. With ``debug_checks``
(or ``KDTREE_DEBUG_CHECKS=1``) the per-request lengths are also checked on the host
before the launch, and slot indices on the device after it. Without it nothing per-step
is read on the host and the op is safe to capture in a CUDA graph; the kernel clamps
every data-dependent read to its tensor either way.

The launch goes through the torch custom op ``torch.ops.kdtree.tree_verify`` (fake
implementation registered), on the current stream, with a workspace allocated once per
device and grown only outside graph capture.
"""

from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Sequence
from functools import lru_cache

import torch

from kdtree.params_mirror import fill_params, params_struct

HEAD_DIM = 576
VALUE_DIM = 512
MAX_HEADS = 128
MAX_DRAFT = 64
LOG2E = 1.4426950408889634

_ERROR_BITS = {
    1: "kv_indices holds slot(s) outside [0, k_buffer.shape[0])",
    2: "kv_indptr points past the end of kv_indices",
    4: "custom_mask is too short for mask_indptr and the request lengths",
    8: "qo_indptr gives a request fewer than 0 or more than max_len_extend draft tokens",
    16: "kv_indptr gives a request a negative prefix length",
    32: "qo_indptr points past the end of q_extend",
}


def _params_struct(root=None) -> type[ctypes.Structure]:
    from kdtree.build import source_dir

    return params_struct(root or source_dir())


def __getattr__(name: str):
    """``VerifyParams``: the shipped sources' struct, read from their verify_params.h when first
    asked for (importing this module needs no sources)."""
    if name == "VerifyParams":
        return _params_struct()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def declare_abi(lib: ctypes.CDLL, params_type: type[ctypes.Structure]) -> ctypes.CDLL:
    """Sets the argument and result types of the library's C ABI (verify_api.cu), launching
    with ``params_type`` (the build's VerifyParams); returns ``lib``."""
    lib.params_type = params_type
    lib.kdtree_verify_launch.argtypes = [ctypes.POINTER(params_type), ctypes.c_void_p]
    lib.kdtree_verify_launch.restype = ctypes.c_int
    lib.kdtree_verify_launch_part.argtypes = [ctypes.POINTER(params_type), ctypes.c_void_p, ctypes.c_int]
    lib.kdtree_verify_launch_part.restype = ctypes.c_int
    lib.kdtree_plan.argtypes = [ctypes.c_int64] * 8 + [ctypes.POINTER(ctypes.c_int64)]
    lib.kdtree_plan.restype = ctypes.c_int
    lib.kdtree_combine_shape.argtypes = [ctypes.c_int64] * 3 + [ctypes.POINTER(ctypes.c_int64)]
    lib.kdtree_combine_shape.restype = ctypes.c_int
    lib.kdtree_path_smem.argtypes = [ctypes.c_int64]
    lib.kdtree_path_smem.restype = ctypes.c_int64
    if hasattr(lib, "kdtree_grid_balances"):  # an older tree may not have it
        lib.kdtree_grid_balances.argtypes = [ctypes.c_int64] * 4
        lib.kdtree_grid_balances.restype = ctypes.c_int
    if hasattr(lib, "kdtree_lengths_uneven"):
        lib.kdtree_lengths_uneven.argtypes = [ctypes.c_int64] * 3
        lib.kdtree_lengths_uneven.restype = ctypes.c_int
    if hasattr(lib, "kdtree_partial_layout"):
        lib.kdtree_partial_layout.argtypes = [ctypes.POINTER(ctypes.c_int64)]
        lib.kdtree_partial_layout.restype = None
    if hasattr(lib, "kdtree_partials_fp16"):
        lib.kdtree_partials_fp16.argtypes = [ctypes.c_int64] * 6
        lib.kdtree_partials_fp16.restype = ctypes.c_int
    if hasattr(lib, "kdtree_code_arch"):
        lib.kdtree_code_arch.argtypes = []
        lib.kdtree_code_arch.restype = ctypes.c_int
    lib.kdtree_error_string.argtypes = [ctypes.c_int]
    lib.kdtree_error_string.restype = ctypes.c_char_p
    return lib


# an older tree's partial states, before kdtree_partial_layout: fp32 values and (m, l)
_FP32_PARTIAL_LAYOUT = (VALUE_DIM * 4, 2)


@lru_cache(maxsize=None)
def partial_layout(lib) -> tuple[int, int]:
    """(bytes of partial values, 32-bit scalars) per query row and workspace slot of a split
    call launched with ``lib``: its own layout, so a same-run A/B against an older tree
    gives that build the workspace it writes. Asked of the library once (every launch sizes
    its workspace with it)."""
    if not hasattr(lib, "kdtree_partial_layout"):
        return _FP32_PARTIAL_LAYOUT
    out = (ctypes.c_int64 * 2)()
    lib.kdtree_partial_layout(out)
    return int(out[0]), int(out[1])


def partials_fp16(path: int, n_max: int, heads: int, bs: int, splits: int, rows: int, lib=None) -> bool:
    """Whether a split call of KernelPath ``path`` (plan()'s), ``n_max`` draft tokens per
    request at most, ``heads`` heads, ``bs`` requests, ``splits`` workspace slots and ``rows``
    query rows (T x H) launches the rows kernel's build that writes fp16 partial states: the
    kernel's own rule (split_plan.h: partials_fp16()), from static sizes only, so one captured
    graph keeps one build. That build still writes fp32 from a one-request call it runs in the
    short layout (a short context, decided on the device). A library without the rule (an
    older tree) writes fp32."""
    lib = lib or _library()
    args = {"path": path, "n_max": n_max, "heads": heads, "bs": bs, "splits": splits, "rows": rows}
    for name, value in args.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"partials_fp16: {name} must be an int >= 0, got {value!r}")
    if not hasattr(lib, "kdtree_partials_fp16"):
        return False
    answer = lib.kdtree_partials_fp16(path, n_max, heads, bs, splits, rows)
    if answer < 0:
        given = " ".join(f"{name}={value}" for name, value in args.items())
        raise ValueError(f"partials_fp16: the library refused {given}")
    return answer == 1


@lru_cache(maxsize=None)
def _library(defines: tuple[str, ...] = (), tree=None, targets=None, ptx=None) -> ctypes.CDLL:
    """The library built with ``defines`` from the shipped sources, or from ``tree`` (another
    source tree, kdtree.build.source_tree()), for the shipped targets or for ``targets``
    (machine code) and ``ptx``; ``lib.params_type`` is its own VerifyParams."""
    from kdtree import build

    path = build.library_path(defines, tree, build.TARGETS if targets is None else targets,
                              build.PTX_TARGETS if ptx is None else ptx)
    return declare_abi(ctypes.CDLL(str(path)), _params_struct(tree))


@lru_cache(maxsize=None)
def code_capability(lib, index: int) -> int:
    """Compute capability (major*10+minor) of the code CUDA device ``index`` runs from ``lib``:
    its machine-code target, or 80 where the driver compiles the library's compute_80 PTX
    (then the plan takes the portable path). A library without that query (an older tree)
    counts as native code for the device."""
    if not hasattr(lib, "kdtree_code_arch"):
        return _device_limits(index)[2]
    with torch.cuda.device(index):
        arch = lib.kdtree_code_arch()
    if arch < 0:
        major, minor = divmod(_device_limits(index)[2], 10)
        raise RuntimeError(f"the kdtree kernel library has no code this GPU (compute capability "
                           f"{major}.{minor}) runs: {lib.kdtree_error_string(-arch).decode()} (it needs "
                           f"sm_80 or later; PTX needs the driver's JIT compiler)")
    return arch


def kernel_build_hash() -> str:
    from kdtree.build import build_hash

    return build_hash()


# -- argument checks ------------------------------------------------------------------------

def _tensor(name, t, dtypes, ndim=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {' or '.join(map(str, dtypes))}, got {t.dtype}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")


def _shape(name, t, expected):
    for axis, want in enumerate(expected):
        if want is not None and t.shape[axis] != want:
            raise ValueError(f"{name} must have shape {tuple('*' if w is None else w for w in expected)}"
                             f", got {tuple(t.shape)} (dimension {axis} is {t.shape[axis]}, expected {want})")


def _rows_aligned(name, t):
    """Last dim contiguous and every row starting on 16 bytes (the kernel's loads)."""
    if t.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dimension, got strides {t.stride()}")
    if t.data_ptr() % 16:
        raise ValueError(f"{name} must start on a 16-byte boundary")
    for axis in range(t.dim() - 1):
        if t.shape[axis] > 1 and (t.stride(axis) * t.element_size()) % 16:
            raise ValueError(f"{name} stride {t.stride(axis)} along dimension {axis} is not a "
                             f"multiple of 16 bytes")


def check_arguments(q, k_extend, v_extend, o, k_buffer, qo_indptr, kv_indptr, kv_indices,
                    custom_mask, mask_indptr, max_len_extend, sm_scale, lse=None):
    """Static checks (no device read). Raises TypeError/ValueError naming the argument."""
    bf16 = (torch.bfloat16,)
    _tensor("q_extend", q, bf16, 3)
    _tensor("k_extend", k_extend, bf16, 3)
    _tensor("v_extend", v_extend, bf16, 3)
    _tensor("o_extend", o, bf16, 3)
    _tensor("k_buffer", k_buffer, bf16, 3)
    index_types = (torch.int32, torch.int64)
    _tensor("qo_indptr", qo_indptr, index_types, 1)
    _tensor("kv_indptr", kv_indptr, index_types, 1)
    _tensor("kv_indices", kv_indices, (torch.int64,), 1)
    T, H = q.shape[0], q.shape[1]
    _shape("q_extend", q, (None, None, HEAD_DIM))
    if not 1 <= H <= MAX_HEADS:
        raise ValueError(f"q_extend must have 1 to {MAX_HEADS} heads, got {H}")
    _shape("k_extend", k_extend, (T, 1, HEAD_DIM))
    _shape("v_extend", v_extend, (T, 1, VALUE_DIM))
    _shape("o_extend", o, (T, H, VALUE_DIM))
    _shape("k_buffer", k_buffer, (None, 1, HEAD_DIM))
    if k_buffer.shape[0] < 1:
        raise ValueError("k_buffer must hold at least one slot (slot 0 is the padding slot)")
    if qo_indptr.shape[0] < 2:
        raise ValueError(f"qo_indptr must have bs+1 >= 2 entries, got {qo_indptr.shape[0]}")
    if kv_indptr.shape[0] != qo_indptr.shape[0]:
        raise ValueError(f"kv_indptr must have as many entries as qo_indptr "
                         f"({qo_indptr.shape[0]}), got {kv_indptr.shape[0]}")
    if custom_mask is not None:
        _tensor("custom_mask", custom_mask, (torch.bool, torch.uint8), 1)
        if mask_indptr is None:
            raise ValueError("mask_indptr is required when custom_mask is given")
        _tensor("mask_indptr", mask_indptr, (torch.int64,), 1)
        if mask_indptr.shape[0] != qo_indptr.shape[0]:
            raise ValueError(f"mask_indptr must have as many entries as qo_indptr "
                             f"({qo_indptr.shape[0]}), got {mask_indptr.shape[0]}")
    if not isinstance(max_len_extend, int) or isinstance(max_len_extend, bool):
        raise TypeError(f"max_len_extend must be an int, got {type(max_len_extend).__name__}")
    if not 1 <= max_len_extend <= MAX_DRAFT:
        raise ValueError(f"max_len_extend must be in 1..{MAX_DRAFT}, got {max_len_extend}")
    if not isinstance(sm_scale, (int, float)) or not math.isfinite(sm_scale) or sm_scale <= 0:
        raise ValueError(f"sm_scale must be a finite positive number, got {sm_scale!r}")
    if lse is not None:
        _tensor("lse_extend", lse, (torch.float32,), 2)
        _shape("lse_extend", lse, (T, H))
        if lse.stride(1) != 1:
            raise ValueError(f"lse_extend must be contiguous in its last dimension, got strides {lse.stride()}")
    tensors = {"q_extend": q, "k_extend": k_extend, "v_extend": v_extend, "o_extend": o,
               "k_buffer": k_buffer, "qo_indptr": qo_indptr, "kv_indptr": kv_indptr,
               "kv_indices": kv_indices, "custom_mask": custom_mask,
               "mask_indptr": mask_indptr, "lse_extend": lse}
    device = q.device
    if device.type != "cuda":
        raise ValueError(f"q_extend must be on a CUDA device, got {device}")
    for name, t in tensors.items():
        if t is not None and t.device != device:
            raise ValueError(f"{name} must be on {device} like q_extend, got {t.device}")
    for name in ("q_extend", "k_extend", "v_extend", "o_extend", "k_buffer"):
        _rows_aligned(name, tensors[name])
    for name in ("qo_indptr", "kv_indptr", "kv_indices", "custom_mask", "mask_indptr"):
        t = tensors[name]
        if t is not None and t.stride(0) != 1 and t.shape[0] > 1:
            raise ValueError(f"{name} must be contiguous, got stride {t.stride(0)}")


def check_lengths(q, k_buffer, qo_indptr, kv_indptr, kv_indices, custom_mask, mask_indptr,
                  max_len_extend):
    """Debug-mode checks of the per-request lengths (reads the indptrs on the host)."""
    qo = qo_indptr.tolist()
    kv = kv_indptr.tolist()
    for b in range(len(qo) - 1):
        n, prefix = qo[b + 1] - qo[b], kv[b + 1] - kv[b]
        if n < 0 or n > max_len_extend:
            raise ValueError(f"qo_indptr gives request {b} {n} draft tokens; expected "
                             f"0..max_len_extend ({max_len_extend})")
        if prefix < 0:
            raise ValueError(f"kv_indptr gives request {b} a negative prefix length ({prefix})")
    if qo[0] < 0 or qo[-1] > q.shape[0]:
        raise ValueError(f"qo_indptr spans [{qo[0]}, {qo[-1]}), outside q_extend's {q.shape[0]} tokens")
    if kv[0] < 0 or kv[-1] > kv_indices.shape[0]:
        raise ValueError(f"kv_indptr spans [{kv[0]}, {kv[-1]}), outside kv_indices' "
                         f"{kv_indices.shape[0]} entries")
    if custom_mask is not None:
        mk = mask_indptr.tolist()
        for b in range(len(qo) - 1):
            n, prefix = qo[b + 1] - qo[b], kv[b + 1] - kv[b]
            need = mk[b] + n * (prefix + n)
            if mk[b] < 0 or need > custom_mask.shape[0]:
                raise ValueError(f"custom_mask is too short: request {b} needs entries "
                                 f"[{mk[b]}, {need}) of {custom_mask.shape[0]}")


# -- workspace -----------------------------------------------------------------------------

_WORKSPACE: dict[int, dict[str, torch.Tensor]] = {}
# Buffers a growth replaced: a CUDA graph captured before the growth still reads and writes
# them at every replay, so they are never freed.
_RETIRED_WORKSPACES: list[dict[str, torch.Tensor]] = []


def grown_size(needed: int, old: int, cap: int) -> int:
    """Elements of a grown workspace buffer: at least ``needed``, else twice ``old`` up to
    ``cap``, so the kept buffers a series of growths leaves add up to less than the last
    one (a graph captured before a growth still uses the buffer it replaced)."""
    return max(needed, min(2 * old, cap), 1)


def _workspace(device: torch.device, acc_floats: int, ml_floats: int) -> dict[str, torch.Tensor]:
    """Per-device buffers, allocated once and grown only outside CUDA-graph capture; the
    buffers a growth replaces are kept (graphs captured earlier still use them). Sizes in
    32-bit words: ``acc`` holds the partial values (room for fp32 ones, partial_layout()),
    ``ml`` their scalars."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    ws = _WORKSPACE.get(index)
    if ws is None or ws["acc"].numel() < acc_floats or ws["ml"].numel() < ml_floats:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("kdtree workspace too small during CUDA-graph capture: call the "
                               "op once eagerly with the capture's shapes before capturing")
        old = ws or {}
        if ws is not None:
            _RETIRED_WORKSPACES.append(ws)
        cap = workspace_budget_bytes() // 4
        ws = {
            "acc": torch.empty(grown_size(acc_floats, old["acc"].numel() if old else 0, cap),
                               dtype=torch.float32, device=device),
            "ml": torch.empty(max(grown_size(ml_floats, old["ml"].numel() if old else 0, cap), 2),
                              dtype=torch.float32, device=device),
            "error": torch.zeros(1, dtype=torch.int32, device=device),
            "layout": torch.zeros(1, dtype=torch.int32, device=device),  # written by every batch call
        }
        _WORKSPACE[index] = ws
    return ws


@lru_cache(maxsize=None)
def _device_limits(index: int) -> tuple[int, int, int]:
    """(SM count, opt-in shared memory per block in bytes, capability major*10+minor) of
    CUDA device ``index``."""
    props = torch.cuda.get_device_properties(index)
    return (props.multi_processor_count, int(props.shared_memory_per_block_optin),
            props.major * 10 + props.minor)


def workspace_budget_bytes() -> int:
    """``KDTREE_WORKSPACE_MB``: the split-KV workspace's budget in MiB (default 512; a
    fraction of a MiB is allowed), in bytes."""
    value = os.environ.get("KDTREE_WORKSPACE_MB", "512")
    try:
        mib = float(value)
    except ValueError:
        mib = -1.0
    if not (0.0 <= mib < float(1 << 40)):
        raise ValueError(f"KDTREE_WORKSPACE_MB must be a number of MiB, 0 or more, got {value!r}")
    return int(mib * (1 << 20))


PATHS = {"auto": -1, "portable": 0, "tiled": 1, "wgmma": 2}
PATH_NAMES = {0: "portable", 1: "tiled-32", 2: "tiled-64", 3: "wgmma-16", 4: "wgmma-32", 5: "wgmma-64"}


def requested_path() -> str:
    """``KDTREE_KERNEL_PATH``: auto (default: wgmma on compute capability 9.0, else tiled
    where the device's shared memory allows, else portable), portable, tiled, or wgmma
    (Hopper's warpgroup MMAs, sm_90a)."""
    value = os.environ.get("KDTREE_KERNEL_PATH", "auto")
    if value not in PATHS:
        raise ValueError(f"KDTREE_KERNEL_PATH must be one of {sorted(PATHS)}, got {value!r}")
    return value


def combine_shape(rows: int, num_splits: int, device: torch.device, lib=None) -> tuple[int, int, int]:
    """(warps per query row, CTAs, CTAs per SM it is built for) of the combine of a call with
    ``num_splits`` grid splits per request (the plan's ``base_splits``; a batch's combine
    merges twice as many workspace slots with the same warps) and ``rows`` query rows (tokens
    x heads) on ``device``; one warp per row is the row kernel (few splits of many rows), more
    the chunk kernel (combine.cuh)."""
    lib = lib or _library()
    index = device.index if device.index is not None else torch.cuda.current_device()
    out = (ctypes.c_int64 * 3)()
    if lib.kdtree_combine_shape(rows, num_splits, _device_limits(index)[0], out) != 0:
        raise ValueError(f"combine_shape: rows must be >= 1 and num_splits at least 2 and at most the "
                         f"plans' maximum, got rows={rows}, num_splits={num_splits}")
    return out[0], out[1], out[2]


def grid_balances(path: int, n_max: int, heads: int, bs: int, lib=None) -> bool:
    """Whether a call of kernel path ``path`` (a plan's) and these sizes balances a batch in
    its grid (the seesaw kernel) rather than in the batch layout (split_plan.h)."""
    lib = lib or _library()
    return bool(lib.kdtree_grid_balances(path, n_max, heads, bs))


def lengths_uneven(lengths: Sequence[int], lib=None) -> bool:
    """Whether a batch whose requests have these lengths (prefix + draft tokens each) is uneven
    enough to take the batch layout in a call whose plan gives it one (batch_layout.cuh)."""
    lengths = list(lengths)
    if not lengths or any(not isinstance(n, int) or n < 0 or n >= 1 << 32 for n in lengths):
        raise ValueError(f"lengths_uneven: lengths must be one or more ints in [0, 2**32), got {lengths[:8]}")
    lib = lib or _library()
    code = lib.kdtree_lengths_uneven(sum(lengths), max(lengths), len(lengths))
    if code != 0 and code != 1:
        raise ValueError(f"lengths_uneven: the library refused lengths {lengths[:8]} (code {code})")
    return bool(code)


def plan(bs: int, heads: int, n_max: int, device: torch.device, lib=None) -> tuple[int, int, int, int]:
    """(num_splits, row_blocks, path, base_splits) for these static sizes on ``device``:
    the workspace slots per request that the combine merges, and the grid's KV splits per
    request (fewer than the slots in a batch, whose CTAs then cut each request into as many
    pieces as its share of the batch's positions: the batch layout)."""
    lib = lib or _library()
    index = device.index if device.index is not None else torch.cuda.current_device()
    sms, smem, capability = _device_limits(index)
    code_arch = code_capability(lib, index)
    out = (ctypes.c_int64 * 4)()
    request = requested_path()
    code = lib.kdtree_plan(bs, heads, n_max, sms, smem, code_arch, workspace_budget_bytes(),
                           PATHS[request], out)
    if code == 1:
        need = lib.kdtree_path_smem(2 if request == "tiled" else 5)
        native = "sm_90a machine code" if request == "wgmma" else "sm_90a or sm_120a machine code"
        raise RuntimeError(f"KDTREE_KERNEL_PATH={request} needs {need} bytes of shared memory per "
                           f"block and {native}; this device allows {smem} (capability "
                           f"{capability // 10}.{capability % 10}) and runs the library's "
                           f"{'PTX' if code_arch != capability else 'machine code'} for {code_arch // 10}.{code_arch % 10}")
    if code != 0:
        raise ValueError(f"kdtree plan: bad sizes bs={bs} heads={heads} n_max={n_max}")
    return int(out[1]), int(out[2]), int(out[0]), int(out[3])


def _ptr(t):
    return None if t is None else t.data_ptr()


def _launch(q, k_extend, v_extend, o, k_buffer, qo_indptr, kv_indptr, kv_indices,
            custom_mask, mask_indptr, max_len_extend, sm_scale, lse, debug_checks, is_causal=True,
            lib=None, part=0) -> tuple[int, int]:
    """Launch (all or ``part`` of) one call; returns its (num_splits, path)."""
    lib = lib or _library()
    bs, T, H = qo_indptr.shape[0] - 1, q.shape[0], q.shape[1]
    splits, row_blocks, path, base_splits = plan(bs, H, max_len_extend, q.device, lib)
    rows = T * H
    value_bytes, scalars = partial_layout(lib)
    ws = _workspace(q.device, splits * rows * value_bytes // 4 if splits > 1 else 0, splits * rows * scalars)
    if debug_checks:
        ws["error"].zero_()
    p = fill_params(lib.params_type, dict(
        q=_ptr(q), k_extend=_ptr(k_extend), v_extend=_ptr(v_extend), k_buffer=_ptr(k_buffer),
        o=_ptr(o), lse=_ptr(lse), qo_indptr=_ptr(qo_indptr), kv_indptr=_ptr(kv_indptr),
        kv_indices=_ptr(kv_indices), mask=_ptr(custom_mask), mask_indptr=_ptr(mask_indptr),
        ws_acc=_ptr(ws["acc"]), ws_ml=_ptr(ws["ml"]), error_flag=_ptr(ws["error"]),
        layout_flag=_ptr(ws["layout"]),
        q_stride_t=q.stride(0), q_stride_h=q.stride(1), ke_stride_t=k_extend.stride(0),
        ve_stride_t=v_extend.stride(0), kb_stride=k_buffer.stride(0),
        o_stride_t=o.stride(0), o_stride_h=o.stride(1),
        lse_stride_t=lse.stride(0) if lse is not None else 0,
        kv_buffer_rows=k_buffer.shape[0], kv_indices_len=kv_indices.shape[0],
        mask_len=custom_mask.shape[0] if custom_mask is not None else 0,
        qo_is_64=int(qo_indptr.dtype == torch.int64), kv_is_64=int(kv_indptr.dtype == torch.int64),
        bs=bs, heads=H, n_max=max_len_extend, total_tokens=T, num_splits=splits,
        row_blocks=row_blocks, base_splits=base_splits, debug_checks=int(bool(debug_checks)), causal=int(bool(is_causal)),
        path=path,
        scale_log2=float(sm_scale) * LOG2E,
    ))
    with torch.cuda.device(q.device):
        stream = torch.cuda.current_stream(q.device).cuda_stream
        code = lib.kdtree_verify_launch_part(ctypes.byref(p), ctypes.c_void_p(stream), part)
    if code != 0:
        raise RuntimeError(f"kdtree verify launch failed: {lib.kdtree_error_string(code).decode()}")
    if debug_checks:
        flags = int(ws["error"].item())
        problems = [msg for bit, msg in _ERROR_BITS.items() if flags & bit]
        if problems:
            raise ValueError("kdtree debug checks: " + "; ".join(problems))
    return splits, path


@torch.library.custom_op("kdtree::tree_verify", mutates_args=("o", "lse"))
def tree_verify(q: torch.Tensor, k_extend: torch.Tensor, v_extend: torch.Tensor, o: torch.Tensor,
                k_buffer: torch.Tensor, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor,
                kv_indices: torch.Tensor, custom_mask: torch.Tensor | None,
                mask_indptr: torch.Tensor | None, max_len_extend: int, sm_scale: float,
                lse: torch.Tensor | None, debug_checks: bool = False, is_causal: bool = True) -> None:
    """Write verify attention into ``o`` (and ``lse``); see the module docstring. With
    ``is_causal`` a draft never sees a later draft even where the mask is set (SGLang's
    Triton kernel bounds its draft loop the same way; real tree masks are lower-triangular,
    CUDA-graph padding blocks are all-true)."""
    check_arguments(q, k_extend, v_extend, o, k_buffer, qo_indptr, kv_indptr, kv_indices,
                    custom_mask, mask_indptr, max_len_extend, sm_scale, lse)
    if debug_checks:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("debug_checks read lengths on the host and cannot run inside "
                               "CUDA-graph capture")
        check_lengths(q, k_buffer, qo_indptr, kv_indptr, kv_indices, custom_mask, mask_indptr,
                      max_len_extend)
    _launch(q, k_extend, v_extend, o, k_buffer, qo_indptr, kv_indptr, kv_indices, custom_mask,
            mask_indptr, max_len_extend, sm_scale, lse, debug_checks, is_causal)


@tree_verify.register_fake
def _tree_verify_fake(q, k_extend, v_extend, o, k_buffer, qo_indptr, kv_indptr, kv_indices,
                      custom_mask, mask_indptr, max_len_extend, sm_scale, lse,
                      debug_checks=False, is_causal=True) -> None:
    return None


def op_arguments(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr,
                 kv_indptr, kv_indices, custom_mask, is_causal, mask_indptr, max_len_extend,
                 k_scale=1.0, v_scale=1.0, sm_scale=None, logit_cap=0.0,
                 skip_prefix_custom_mask=True, sliding_window_size=-1, sinks=None,
                 window_kv_offsets=None, xai_temperature_len=-1, lse_extend=None,
                 debug_checks=None, **unsupported) -> tuple:
    """Check the SGLang-form call and return the positional arguments of
    ``torch.ops.kdtree.tree_verify``. Raises TypeError/ValueError naming the argument."""
    if unsupported:
        raise TypeError(f"unsupported argument(s) for the kdtree verify kernel: {sorted(unsupported)}")
    for name, value, neutral in (("k_scale", k_scale, 1.0), ("v_scale", v_scale, 1.0),
                                 ("logit_cap", logit_cap, 0.0),
                                 ("xai_temperature_len", xai_temperature_len, -1)):
        if value != neutral:
            raise ValueError(f"{name} must be {neutral} (not supported by the kdtree kernel), got {value!r}")
    if sliding_window_size not in (-1, 0, None):
        raise ValueError(f"sliding_window_size must be -1 (no window), got {sliding_window_size!r}")
    for name, value in (("sinks", sinks), ("window_kv_offsets", window_kv_offsets)):
        if value is not None:
            raise ValueError(f"{name} must be None (not supported by the kdtree kernel)")
    if not skip_prefix_custom_mask:
        raise ValueError("skip_prefix_custom_mask must be True: prefix columns are always visible")
    if custom_mask is None and not is_causal:
        raise ValueError("is_causal must be True when custom_mask is None (a chain)")
    _tensor("k_buffer", k_buffer, (torch.bfloat16,), 3)
    if not isinstance(v_buffer, torch.Tensor):
        raise TypeError(f"v_buffer must be a torch.Tensor, got {type(v_buffer).__name__}")
    if (v_buffer.data_ptr() != k_buffer.data_ptr() or v_buffer.shape[-1] != VALUE_DIM
            or v_buffer.shape[:-1] != k_buffer.shape[:-1] or v_buffer.stride() != k_buffer.stride()):
        raise ValueError("v_buffer must be the first 512 dims of k_buffer (the same storage, "
                         f"k_buffer[..., :512]); got shape {tuple(v_buffer.shape)} strides "
                         f"{v_buffer.stride()}")
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(HEAD_DIM)
    if debug_checks is None:
        debug_checks = os.environ.get("KDTREE_DEBUG_CHECKS", "") == "1"
    # checked here too: the op's schema would reject a non-int before check_arguments runs
    if isinstance(max_len_extend, bool) or not isinstance(max_len_extend, int):
        raise TypeError(f"max_len_extend must be an int, got {type(max_len_extend).__name__}")
    return (q_extend, k_extend, v_extend, o_extend, k_buffer, qo_indptr, kv_indptr, kv_indices,
            custom_mask, mask_indptr, max_len_extend, float(sm_scale), lse_extend,
            bool(debug_checks), bool(is_causal))


LAUNCH_PARTS = {"all": 0, "main": 1, "combine": 2}


def launch_part(part: str, *args, **kwargs) -> tuple[int, str]:
    """Benchmark hook: launch only part of a call in SGLang's form ("all", "main": the
    split kernel, "combine": the merge of the splits, reading the workspace the last
    "main" wrote). Returns (KV splits of the call (1: no combine), kernel path name)."""
    if part not in LAUNCH_PARTS:
        raise ValueError(f"part must be one of {sorted(LAUNCH_PARTS)}, got {part!r}")
    op_args = op_arguments(*args, **kwargs)
    return _checked_launch(op_args[:13] + (False,) + op_args[14:], _library(), LAUNCH_PARTS[part])


def launch_build(defines: tuple[str, ...], *args, tree=None, targets=None, ptx=None, **kwargs) -> tuple[int, str]:
    """One whole call in SGLang's form, launched with the library built with ``defines``
    (``-D`` switches: the A/B builds of ``kdtree-gate ab``, the broken kernels of the
    negative controls), from the shipped sources or from ``tree`` (another source tree, with
    its own VerifyParams layout), for the shipped targets or ``targets``/``ptx``, bypassing
    the torch op. Returns (KV splits, kernel path name)."""
    lib = _library(tuple(defines), tree, None if targets is None else tuple(targets),
                   None if ptx is None else tuple(ptx))
    return _checked_launch(op_arguments(*args, **kwargs), lib, 0)


def _checked_launch(op_args: tuple, lib, part: int) -> tuple[int, str]:
    check_arguments(*op_args[:13])
    splits, path = _launch(*op_args, lib=lib, part=part)
    return splits, PATH_NAMES[path]


def tree_verify_fwd(*args, **kwargs) -> bool:
    """Drop-in for SGLang's ``extend_attention_fwd`` in MLA target verify (same positional
    and keyword form, see :func:`op_arguments`). Writes ``o_extend`` (and ``lse_extend``)
    and returns True, as SGLang's verify slot expects."""
    torch.ops.kdtree.tree_verify(*op_arguments(*args, **kwargs))
    return True
