"""Exact bf16 arithmetic facts: rounding from fp64, ULP size, ULP distance.

bf16 has 8 significant bits and fp32's exponent range: normal numbers from 2^-126,
subnormal spacing 2^-133, largest finite (2 - 2^-7)·2^127.
"""

from __future__ import annotations

import torch

MIN_SUBNORMAL_EXPONENT = -133  # bf16 spacing below 2^-126
SIGNIFICANT_BITS = 8
MAX_FINITE = (2.0 - 2.0 ** -7) * 2.0 ** 127


def _pow2(exponent: torch.Tensor) -> torch.Tensor:
    """2**exponent in fp64, exact for integer exponents in fp64's range."""
    return torch.ldexp(torch.ones_like(exponent, dtype=torch.float64), exponent)


def round_fp64_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """Round fp64 values to the nearest bf16 (ties to even) in ONE rounding.

    ``x.to(torch.bfloat16)`` from fp64 goes through fp32 and can round twice; this does
    not. NaN and ±Inf pass through; finite values past the overflow threshold become ±Inf.
    """
    if x.dtype != torch.float64:
        raise TypeError(f"round_fp64_to_bf16: x must be float64, got {x.dtype}")
    finite = torch.isfinite(x)
    safe = torch.where(finite, x, torch.zeros_like(x))
    _, exponent = torch.frexp(safe)  # safe = m·2^exponent, 0.5 <= |m| < 1
    step = _pow2((exponent - SIGNIFICANT_BITS).clamp(min=MIN_SUBNORMAL_EXPONENT))
    rounded = torch.round(safe / step) * step  # exact: step is a power of two
    rounded = torch.where(rounded.abs() > MAX_FINITE, torch.copysign(
        torch.full_like(rounded, float("inf")), rounded), rounded)
    rounded = torch.where(finite, rounded, x)
    return rounded.to(torch.float32).to(torch.bfloat16)  # both exact now


def bf16_ulp(magnitude: torch.Tensor) -> torch.Tensor:
    """Spacing of bf16 numbers at ``|magnitude|`` (fp64): 2^(floor(log2|m|) - 7),
    never below the subnormal spacing 2^-133; Inf and NaN pass through."""
    m = magnitude.to(torch.float64).abs()
    _, exponent = torch.frexp(torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    exponent = torch.where(m == 0, torch.full_like(exponent, -10_000), exponent)
    ulp = _pow2((exponent - SIGNIFICANT_BITS).clamp(min=MIN_SUBNORMAL_EXPONENT))
    return torch.where(torch.isfinite(m), ulp, m)


def bf16_ordinal(x: torch.Tensor) -> torch.Tensor:
    """Map bf16 values to integers so adjacent bf16 numbers differ by 1 (+0 and -0 both
    map to 0; ±Inf sit one past the largest finite). Returns int32."""
    if x.dtype != torch.bfloat16:
        raise TypeError(f"bf16_ordinal: x must be bfloat16, got {x.dtype}")
    bits = x.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
    magnitude = bits & 0x7FFF
    return torch.where(bits >= 0x8000, -magnitude, magnitude)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many bf16 steps apart ``a`` and ``b`` are, elementwise (int32).
    Raises ValueError if either holds NaN (the distance is undefined there)."""
    if a.shape != b.shape:
        raise ValueError(f"ulp_distance: shapes differ, a {tuple(a.shape)} vs b {tuple(b.shape)}")
    nan = torch.isnan(a) | torch.isnan(b)
    if bool(nan.any()):
        raise ValueError(f"ulp_distance: NaN at {nan.nonzero()[:4].tolist()} (undefined)")
    return (bf16_ordinal(a) - bf16_ordinal(b)).abs()
