"""KDTREE_VERIFY: the kernel in TritonAttnBackend's own verify slot.

SGLang's ``TritonAttnBackend.forward_extend`` calls ``self.verify_shared_kv_fwd(...)``
for TARGET_VERIFY when ``self.use_verify_shared_kv`` is set (after the KV write, with
``extend_attention_fwd``'s arguments plus ``max_bs``); True means ``o`` was written,
False falls back to ``extend_attention_fwd``. An AFTER hook on ``__init__`` puts a
:class:`VerifySlot` there, on MLA target backends only (draft runners are left alone).

Modes: ``on`` serves this kernel. ``validate`` serves SGLang's Triton kernel and also runs
this one: on eager calls the parity rule compares both with the fp64 reference and
mismatches are logged (rate-limited, with the worst elements); inside a CUDA graph the
two outputs are compared on the device (largest difference in bf16 ULPs at each row's
largest magnitude), skipping CUDA-graph padding requests, and the maximum is reported
from the next eager call or at exit.
Shapes this kernel does not serve (not 576/512, logit cap, window, sinks, fp8 scales)
fall back to what the slot held before, or to ``extend_attention_fwd``.
"""

from __future__ import annotations

import atexit
import logging
import time
from pathlib import Path

import torch

from kdtree.coverage_emitter import emit, make_record

HOOK_NAME = "verify-override"
TARGET = "sglang.srt.layers.attention.triton_backend.TritonAttnBackend.__init__"
logger = logging.getLogger("kdtree")


def unsupported_reason(q, k_extend, v_extend, k_buffer, v_buffer, k_scale, v_scale, logit_cap,
                       sliding_window_size, sinks, window_kv_offsets, xai_temperature_len) -> str | None:
    if q.dim() != 3 or q.shape[-1] != 576 or v_extend.shape[-1] != 512 or k_extend.shape[1] != 1:
        return f"shape q {tuple(q.shape)}, v {tuple(v_extend.shape)} is not absorbed MLA 576/512"
    if q.dtype != torch.bfloat16 or k_buffer.dtype != torch.bfloat16:
        return f"dtypes q {q.dtype}, k_buffer {k_buffer.dtype} (bf16 only)"
    if k_scale not in (None, 1.0) or v_scale not in (None, 1.0):
        return "fp8 KV scales"
    if logit_cap or sinks is not None or window_kv_offsets is not None:
        return "logit cap, sinks or window offsets"
    if sliding_window_size not in (-1, 0, None) or xai_temperature_len not in (-1, None):
        return "sliding window or temperature length"
    if v_buffer.data_ptr() != k_buffer.data_ptr():
        return "v_buffer is not the first 512 dims of k_buffer"
    return None


def padded_rows(qo_indptr, kv_indptr, kv_indices, rows: int) -> torch.Tensor:
    """Bool [rows]: rows of CUDA-graph padding requests, computed on the device (no host
    reads). SGLang pads a captured batch with requests whose prefix is one token at the
    reserved padding slot 0, which no real request holds; their results are discarded
    (and SGLang's Triton kernel leaves garbage there), so validation skips them."""
    bs = qo_indptr.shape[0] - 1
    starts = kv_indptr[:bs].long()
    lengths = kv_indptr[1:bs + 1].long() - starts
    last = max(kv_indices.shape[0] - 1, 0)
    first_slot = kv_indices[starts.clamp(0, last)] if kv_indices.numel() else torch.ones_like(starts)
    padded_request = (lengths == 1) & (first_slot == 0)
    row = torch.arange(rows, device=qo_indptr.device)
    owner = torch.searchsorted(qo_indptr[1:bs + 1].long(), row, right=True).clamp(max=max(bs - 1, 0))
    return padded_request[owner]


class Validator:
    """Compares the kernel with the served (Triton) output."""

    def __init__(self, log_seconds: int):
        self.log_seconds = log_seconds
        self.compared = 0
        self.mismatches = 0
        self._last_log = float("-inf")
        self._graph_stat: torch.Tensor | None = None   # max ULP difference inside graphs
        self.graph_worst = 0.0                          # the largest ever reported
        atexit.register(self.report_graph_stat)

    def compare_eager(self, candidate_out, served_out, call: dict) -> None:
        from kdtree.parity import check_parity
        from kdtree.reference import verify_reference

        self.report_graph_stat()
        ref, scale, _ = verify_reference(call["q"], call["k_extend"], call["v_extend"], call["k_buffer"],
                                         call["qo_indptr"], call["kv_indptr"], call["kv_indices"],
                                         call["custom_mask"], call["mask_indptr"], call["sm_scale"])
        T = int(call["qo_indptr"][-1])
        kernel = check_parity(candidate_out[:T], ref[:T], scale[:T])
        served = check_parity(served_out[:T], ref[:T], scale[:T])
        self.compared += 1
        if kernel.passed:
            return
        self.mismatches += 1
        now = time.monotonic()
        if now - self._last_log >= self.log_seconds:
            self._last_log = now
            logger.warning("[kdtree] validate: kernel fails the parity rule (%d of %d calls so far); "
                           "SGLang's kernel on the same call: max %.3f ulp\n%s",
                           self.mismatches, self.compared, served.max_ulps, kernel.summary())

    def compare_in_graph(self, candidate_out, served_out, qo_indptr, kv_indptr, kv_indices) -> None:
        from kdtree.bf16 import bf16_ulp

        if self._graph_stat is None or self._graph_stat.device != served_out.device:
            raise RuntimeError("validate: call the slot once eagerly before CUDA-graph capture")
        # No fp64 reference inside a graph: measure the difference in bf16 ULPs at each
        # (token, head) row's largest magnitude, a stand-in for the rule's scale Σp|v|
        # (element-wise magnitudes would flag harmless cancellation near zero).
        a, b = candidate_out.double(), served_out.double()
        row_scale = torch.maximum(a.abs(), b.abs()).amax(dim=-1, keepdim=True)
        diff = ((a - b).abs() / bf16_ulp(row_scale)).nan_to_num(nan=float("inf")).amax(dim=(1, 2))
        padded = padded_rows(qo_indptr, kv_indptr, kv_indices, served_out.shape[0])
        diff = torch.where(padded, torch.zeros_like(diff), diff)
        torch.maximum(self._graph_stat, diff.amax().reshape(1), out=self._graph_stat)

    def prepare_graph_stat(self, device) -> None:
        if self._graph_stat is None or self._graph_stat.device != device:
            self._graph_stat = torch.zeros(1, dtype=torch.float64, device=device)

    def report_graph_stat(self) -> float | None:
        """Largest kernel-vs-served difference (bf16 ULPs) seen inside graphs; logged when
        over 2 and reset."""
        if self._graph_stat is None:
            return None
        value = float(self._graph_stat.item())
        self.graph_worst = max(self.graph_worst, value)
        if value > 2.0:
            logger.warning("[kdtree] validate: inside CUDA graphs the kernel differed from the "
                           "served output by up to %.2f bf16 ulp", value)
        self._graph_stat.zero_()
        return value


class VerifySlot:
    """What SGLang calls as ``backend.verify_shared_kv_fwd`` (returns True: o written)."""

    def __init__(self, mode: str, triton_fwd, page_size: int = 1, fallback=None,
                 capture=None, validator: Validator | None = None, kernel=None):
        from kdtree.verify_op import tree_verify_fwd

        if mode not in ("on", "validate"):
            raise ValueError(f"mode must be 'on' or 'validate', got {mode!r}")
        self.mode = mode
        self.triton_fwd = triton_fwd
        self.page_size = page_size
        self.fallback = fallback
        self.capture = capture
        self.validator = validator or (Validator(60) if mode == "validate" else None)
        self.kernel = kernel or tree_verify_fwd
        self._scratch: dict = {}
        self.calls = {"kernel": 0, "fallback": 0}

    def __call__(self, q, k_extend, v_extend, o, k_buffer, v_buffer, qo_indptr, kv_indptr,
                 kv_indices, custom_mask, is_causal, mask_indptr, max_len_extend, k_scale,
                 v_scale, sm_scale=None, logit_cap=0.0, sliding_window_size=-1, sinks=None,
                 window_kv_offsets=None, xai_temperature_len=-1, max_bs=None, **extra) -> bool:
        reason = unsupported_reason(q, k_extend, v_extend, k_buffer, v_buffer, k_scale, v_scale,
                                    logit_cap, sliding_window_size, sinks, window_kv_offsets,
                                    xai_temperature_len)
        args = (q, k_extend, v_extend, o, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices,
                custom_mask, is_causal, mask_indptr, max_len_extend, k_scale, v_scale)
        if reason is not None:
            self.calls["fallback"] += 1
            if self.fallback is not None:
                return bool(self.fallback(*args, sm_scale, logit_cap=logit_cap,
                                          sliding_window_size=sliding_window_size, sinks=sinks,
                                          window_kv_offsets=window_kv_offsets,
                                          xai_temperature_len=xai_temperature_len, max_bs=max_bs))
            return False
        self.calls["kernel"] += 1
        capturing = torch.cuda.is_current_stream_capturing()
        if self.mode == "on":
            self.kernel(*args, sm_scale=sm_scale)
        else:
            self.triton_fwd(*args, sm_scale=sm_scale, page_size=self.page_size)
            key = (tuple(o.shape), o.device)
            if key not in self._scratch:
                if capturing:
                    raise RuntimeError("validate: call the slot once eagerly before CUDA-graph capture")
                self._scratch[key] = torch.empty_like(o)
                self.validator.prepare_graph_stat(o.device)
            scratch = self._scratch[key]
            self.kernel(q, k_extend, v_extend, scratch, *args[4:], sm_scale=sm_scale)
            if capturing:
                self.validator.compare_in_graph(scratch, o, qo_indptr, kv_indptr, kv_indices)
            else:
                self.validator.compare_eager(scratch, o, dict(
                    q=q, k_extend=k_extend, v_extend=v_extend, k_buffer=k_buffer,
                    qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices,
                    custom_mask=custom_mask,
                    mask_indptr=mask_indptr, sm_scale=sm_scale))
        if self.capture is not None and not capturing:
            self.capture.offer(q, k_extend, v_extend, k_buffer, qo_indptr, kv_indptr, kv_indices,
                               custom_mask, mask_indptr, max_len_extend, sm_scale, o)
        return True


class VerifyOverride:
    """AFTER hook on ``TritonAttnBackend.__init__`` (one instance per registration):
    installs a :class:`VerifySlot` on MLA target backends and reports once per process."""

    def __init__(self, mode: str, strict: bool, status_dir: Path | None, capture=None,
                 validate_log_seconds: int = 60):
        self.mode = mode
        self.strict = strict
        self.status_dir = status_dir
        self.capture = capture
        self.validator = Validator(validate_log_seconds) if mode == "validate" else None
        self._reported = False

    def __call__(self, result, backend, *args, **kwargs):
        if not getattr(backend, "use_mla", False) or getattr(backend, "is_draft_runner", False):
            return None
        try:
            from kdtree.verify_op import kernel_build_hash

            previous = backend.verify_shared_kv_fwd if getattr(backend, "use_verify_shared_kv", False) else None
            backend.verify_shared_kv_fwd = VerifySlot(
                self.mode, backend.extend_attention_fwd, getattr(backend, "page_size", 1),
                previous, self.capture, self.validator)
            backend.use_verify_shared_kv = True
            build, problem = kernel_build_hash(), None
        except Exception as exc:
            build, problem = "none", f"{type(exc).__name__}: {exc}"
        if not self._reported:
            self._reported = True
            if problem is None:
                emit(make_record("effective", HOOK_NAME, f"mode={self.mode} on "
                                 f"{type(backend).__name__}", build), self.status_dir)
            else:
                emit(make_record("failed", HOOK_NAME, problem, build), self.status_dir)
        if problem is not None and self.strict:
            raise RuntimeError(f"kdtree verify-override could not install: {problem}")
        return None
