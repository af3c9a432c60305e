"""The parity rule ("within one bf16 ULP"), docs/DESIGN.md. It ships with the patch (whose
validate mode applies it on the serving host); the gate imports it from here.

Given a kernel's bf16 output, the fp64 reference on the same bf16 inputs and the fp64
scale Σ_t p_t·|v_t| per output element:

1. NaN/Inf first: positions where the bf16-rounded reference is NaN or ±Inf must hold
   exactly that in the output; everywhere else the output must be finite.
2. Every checked element: |out − round_bf16(ref)| ≤ tolerance · ulp_bf16(s), with
   s = max(|ref|, Σ p|v|) (default tolerance 1).
3. The mean signed error in those units lies within ±mean_bound (default 0.25): catches
   truncation bias that stays under the per-element bound.

Errors below are in "scaled ULPs": |out − ref_bf16| / ulp_bf16(s). Elements outside
``checked`` (padding rows, say) are left out and counted as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from kdtree.bf16 import bf16_ulp, round_fp64_to_bf16

HISTOGRAM_EDGES = (0.0, 0.125, 0.25, 0.5, 0.75, 1.0, 2.0, 4.0, 16.0, math.inf)


@dataclass(frozen=True)
class WorstElement:
    index: tuple[int, ...]
    value: float
    reference: float
    scale: float
    ulps: float

    def __str__(self) -> str:
        return (f"at {list(self.index)}: out {self.value:.6g}, ref {self.reference:.6g}, "
                f"scale {self.scale:.4g} -> {self.ulps:.3f} ulp")


@dataclass
class ParityReport:
    passed: bool
    checked: int
    excluded: int
    max_ulps: float
    p99_ulps: float
    p999_ulps: float
    mean_signed_ulps: float
    over_tolerance: int
    nonfinite_mismatches: int
    naive_max_ulps: float  # |out − ref| / ulp_bf16(|ref|): the rule docs/DESIGN.md rejects
    naive_over_tolerance: int
    unrounded_max_ulps: float  # |out − ref_fp64| / ulp_bf16(s): the error before ref rounding
    tolerance_ulps: float
    mean_bound_ulps: float
    worst: list[WorstElement] = field(default_factory=list)
    histogram: list[tuple[float, float, int]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def figures(self) -> dict:
        """The report's figures as plain JSON values (scaled ULPs; histogram bins)."""
        return {"passed": self.passed, "max": self.max_ulps, "p999": self.p999_ulps,
                "mean_signed": self.mean_signed_ulps, "unrounded_max": self.unrounded_max_ulps,
                "histogram": [[lo, hi, int(n)] for lo, hi, n in self.histogram]}

    def brief(self) -> str:
        """One line of figures: max, p99.9, mean signed, error before reference rounding."""
        return (f"max {self.max_ulps:.3f} p99.9 {self.p999_ulps:.3f} mean {self.mean_signed_ulps:+.4f} "
                f"unrounded {self.unrounded_max_ulps:.3f}")

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        lines = [
            f"parity {verdict}: max {self.max_ulps:.3f} ulp (p99 {self.p99_ulps:.3f}, "
            f"p99.9 {self.p999_ulps:.3f}), mean signed {self.mean_signed_ulps:+.4f} ulp, "
            f"{self.over_tolerance} of {self.checked} over {self.tolerance_ulps:g} ulp, "
            f"{self.nonfinite_mismatches} NaN/Inf mismatches, {self.excluded} excluded",
            f"  naive (unscaled) rule: max {self.naive_max_ulps:.1f} ulp, "
            f"{self.naive_over_tolerance} over; against the unrounded fp64 reference: "
            f"max {self.unrounded_max_ulps:.3f} ulp",
        ]
        lines += [f"  reason: {r}" for r in self.reasons]
        lines += [f"  worst {w}" for w in self.worst]
        lines.append("  histogram: " + ", ".join(
            f"[{lo:g},{hi:g}):{n}" for lo, hi, n in self.histogram))
        return "\n".join(lines)


def _require(name: str, t, dtype: torch.dtype, shape=None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {t.dtype}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")


def _quantile(sorted_values: torch.Tensor, q: float) -> float:
    n = sorted_values.numel()
    if n == 0:
        return 0.0
    return float(sorted_values[min(n - 1, max(0, math.ceil(q * n) - 1))])


def check_parity(out: torch.Tensor, reference: torch.Tensor, scale: torch.Tensor, *,
                 checked: torch.Tensor | None = None, tolerance_ulps: float = 1.0,
                 mean_bound_ulps: float = 0.25, worst_count: int = 8) -> ParityReport:
    """Apply the parity rule. ``out`` bf16; ``reference`` and ``scale`` fp64 of the same
    shape (scale = Σ p|v| per element, ≥ 0); ``checked`` an optional bool mask
    broadcastable to ``out`` selecting the elements the rule applies to."""
    _require("out", out, torch.bfloat16)
    _require("reference", reference, torch.float64, out.shape)
    _require("scale", scale, torch.float64, out.shape)
    if checked is None:
        checked = torch.ones_like(out, dtype=torch.bool)
    else:
        _require("checked", checked, torch.bool)
        checked = checked.to(out.device).expand(out.shape)
    reference = reference.to(out.device)
    scale = scale.to(out.device)

    ref_bf16 = round_fp64_to_bf16(reference)
    ref_d, out_d = ref_bf16.to(torch.float64), out.to(torch.float64)
    reasons: list[str] = []

    ref_finite = torch.isfinite(ref_d)
    bad_scale = checked & ref_finite & ~(torch.isfinite(scale) & (scale >= 0))
    if bool(bad_scale.any()):
        raise ValueError(f"scale must be finite and >= 0 where the reference is finite; "
                         f"first bad index {bad_scale.nonzero()[0].tolist()}")
    same_nonfinite = (torch.isnan(ref_d) & torch.isnan(out_d)) | (torch.isinf(ref_d) & (ref_d == out_d))
    nonfinite_bad = checked & ~ref_finite & ~same_nonfinite
    nonfinite_bad |= checked & ref_finite & ~torch.isfinite(out_d)
    nonfinite_mismatches = int(nonfinite_bad.sum())
    if nonfinite_mismatches:
        first = nonfinite_bad.nonzero()[:4].tolist()
        reasons.append(f"{nonfinite_mismatches} NaN/Inf position(s) differ from the "
                       f"reference, first at {first}")

    finite = checked & ref_finite & torch.isfinite(out_d)
    s = torch.maximum(reference.abs(), scale)
    diff = out_d - ref_d
    signed = torch.where(finite, diff / bf16_ulp(s), torch.zeros_like(diff))
    err = signed.abs()
    naive = torch.where(finite, diff.abs() / bf16_ulp(ref_d), torch.zeros_like(diff))

    values = err[finite]
    n = values.numel()
    sorted_values = torch.sort(values).values
    over = int((values > tolerance_ulps).sum())
    mean_signed = float(signed[finite].mean()) if n else 0.0
    if over:
        reasons.append(f"{over} element(s) exceed {tolerance_ulps:g} scaled ulp "
                       f"(max {float(sorted_values[-1]):.3f})")
    if abs(mean_signed) > mean_bound_ulps:
        reasons.append(f"mean signed error {mean_signed:+.4f} ulp is outside "
                       f"±{mean_bound_ulps:g} (a rounding bias)")

    worst: list[WorstElement] = []
    if n:
        k = min(worst_count, err.numel())
        top = torch.topk(err.flatten(), k)
        for ulps, flat in zip(top.values.tolist(), top.indices.tolist()):
            if ulps <= 0 and worst:
                break
            idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), out.shape))
            worst.append(WorstElement(idx, float(out_d[idx]), float(ref_d[idx]),
                                      float(s[idx]), ulps))
    edges = torch.tensor(HISTOGRAM_EDGES, dtype=torch.float64, device=values.device)
    bins = torch.bucketize(values, edges, right=True) - 1
    counts = torch.bincount(bins.clamp(0, len(HISTOGRAM_EDGES) - 2),
                            minlength=len(HISTOGRAM_EDGES) - 1).tolist()
    naive_values = naive[finite]
    unrounded = ((out_d - reference).abs() / bf16_ulp(s))[finite]
    return ParityReport(
        passed=not reasons, checked=int(checked.sum()), excluded=int((~checked).sum()),
        max_ulps=float(sorted_values[-1]) if n else 0.0,
        p99_ulps=_quantile(sorted_values, 0.99), p999_ulps=_quantile(sorted_values, 0.999),
        mean_signed_ulps=mean_signed, over_tolerance=over,
        nonfinite_mismatches=nonfinite_mismatches,
        naive_max_ulps=float(naive_values.max()) if n else 0.0,
        naive_over_tolerance=int((naive_values > tolerance_ulps).sum()),
        unrounded_max_ulps=float(unrounded.max()) if n else 0.0,
        tolerance_ulps=tolerance_ulps, mean_bound_ulps=mean_bound_ulps, worst=worst,
        histogram=[(HISTOGRAM_EDGES[i], HISTOGRAM_EDGES[i + 1], c) for i, c in enumerate(counts)],
        reasons=reasons,
    )


def baseline_problem(kernel: ParityReport, baseline: ParityReport, factor: float = 2.0,
                     floor_ulps: float = 0.5) -> str | None:
    """docs/DESIGN.md: the kernel's max error is at most ``factor`` × the baseline's (SGLang's
    Triton kernel) on the same inputs. The bound never drops below ``floor_ulps``: the
    final correct rounding alone may spend 0.5 ulp. Returns the reason, or None."""
    bound = max(factor * baseline.max_ulps, floor_ulps)
    if kernel.max_ulps > bound:
        return (f"kernel max {kernel.max_ulps:.3f} ulp exceeds {factor:g}x the baseline's "
                f"{baseline.max_ulps:.3f} ulp (bound {bound:.3f})")
    return None
