"""bf16 facts checked against bit patterns and an exhaustive oracle."""

import math

import pytest
import torch

from kdtree.bf16 import bf16_ordinal, bf16_ulp, round_fp64_to_bf16, ulp_distance


def from_bits(*patterns: int) -> torch.Tensor:
    """bf16 tensor from raw 16-bit patterns."""
    signed = [p - 0x10000 if p >= 0x8000 else p for p in patterns]
    return torch.tensor(signed, dtype=torch.int16).view(torch.bfloat16)


def all_finite_bf16() -> tuple[torch.Tensor, torch.Tensor]:
    """Every finite bf16 value as fp64, sorted, with its bit pattern (dedup of ±0)."""
    bits = torch.arange(0, 0x10000, dtype=torch.int32)
    values = from_bits(*bits.tolist()).to(torch.float64)
    keep = torch.isfinite(values) & ~((values == 0) & (bits >= 0x8000))
    values, bits = values[keep], bits[keep]
    order = torch.argsort(values)
    return values[order], bits[order]


def oracle_round(x: torch.Tensor) -> torch.Tensor:
    """Nearest bf16 by search over all finite bf16 values, ties to the even pattern."""
    table, bits = all_finite_bf16()
    hi = torch.searchsorted(table, x).clamp(1, len(table) - 1)
    lo = hi - 1
    d_lo, d_hi = (x - table[lo]).abs(), (table[hi] - x).abs()
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (bits[hi] % 2 == 0))
    return torch.where(pick_hi, table[hi], table[lo])


def test_rounding_matches_exhaustive_oracle_across_ranges():
    gen = torch.Generator().manual_seed(0)
    parts = []
    for lo_exp, hi_exp in ((-140, -126), (-126, -100), (-10, 10), (100, 127)):
        mant = torch.rand(20_000, generator=gen, dtype=torch.float64) + 1.0
        exps = torch.randint(lo_exp, hi_exp, (20_000,), generator=gen)
        sign = torch.where(torch.rand(20_000, generator=gen) < 0.5, -1.0, 1.0).double()
        parts.append(sign * torch.ldexp(mant, exps))
    x = torch.cat(parts)
    got = round_fp64_to_bf16(x).to(torch.float64)
    assert torch.equal(got, oracle_round(x))


def test_exact_halfway_points_round_to_even():
    table, _ = all_finite_bf16()
    finite = table[(table.abs() < 1e30)]
    mids = (finite[:-1] + finite[1:]) / 2  # exact in fp64
    got = round_fp64_to_bf16(mids).to(torch.float64)
    assert torch.equal(got, oracle_round(mids))


def test_single_rounding_differs_from_rounding_through_fp32():
    x = torch.tensor([1 + 2**-8 + 2**-30], dtype=torch.float64)
    through_fp32 = x.to(torch.float32).to(torch.bfloat16)
    assert float(through_fp32) == 1.0  # the double rounding the rule forbids
    assert float(round_fp64_to_bf16(x)) == 1 + 2**-7


def test_overflow_nan_inf_and_signed_zero():
    big = (2 - 2**-8) * 2**127  # halfway between max finite and 2^128: ties to even -> inf
    x = torch.tensor([big, -big, math.nan, math.inf, -math.inf, -0.0, (2 - 2**-7) * 2**127],
                     dtype=torch.float64)
    got = round_fp64_to_bf16(x).to(torch.float64)
    assert got[0] == math.inf and got[1] == -math.inf
    assert math.isnan(got[2]) and got[3] == math.inf and got[4] == -math.inf
    assert got[5] == 0 and math.copysign(1, got[5]) == -1
    assert got[6] == (2 - 2**-7) * 2**127


def test_round_rejects_non_fp64():
    with pytest.raises(TypeError, match="x must be float64"):
        round_fp64_to_bf16(torch.ones(2))


@pytest.mark.parametrize("value, ulp", [
    (1.0, 2**-7), (1.99, 2**-7), (2.0, 2**-6), (0.75, 2**-8), (-3.0, 2**-6),
    (0.0, 2**-133), (2**-130, 2**-133), (2**-126, 2**-133), (2**-125, 2**-132),
    ((2 - 2**-7) * 2**127, 2**120),
])
def test_ulp_size(value, ulp):
    assert float(bf16_ulp(torch.tensor([value], dtype=torch.float64))) == ulp


def test_ulp_of_nonfinite_passes_through():
    got = bf16_ulp(torch.tensor([math.inf, math.nan], dtype=torch.float64))
    assert got[0] == math.inf and math.isnan(got[1])


@pytest.mark.parametrize("a, b, distance", [
    (0x3F80, 0x3F81, 1),      # 1.0 and its successor
    (0x3F80, 0x3F90, 16),
    (0x3FFF, 0x4000, 1),      # across a power of two
    (0x0000, 0x0001, 1),      # zero to the smallest subnormal
    (0x007F, 0x0080, 1),      # largest subnormal to smallest normal
    (0x8000, 0x0000, 0),      # -0 and +0
    (0x8001, 0x0001, 2),      # across zero
    (0xBF80, 0xBF81, 1),      # negatives
    (0xBF80, 0x3F80, 2 * 0x3F80),
    (0x7F7F, 0x7F80, 1),      # largest finite to +Inf
])
def test_ulp_distance_from_bit_patterns(a, b, distance):
    ta, tb = from_bits(a), from_bits(b)
    assert int(ulp_distance(ta, tb)) == distance
    assert int(ulp_distance(tb, ta)) == distance


def test_ordinal_is_monotone_over_all_finite_values():
    table, bits = all_finite_bf16()
    ords = bf16_ordinal(from_bits(*bits.tolist()))
    assert torch.all(ords[1:] - ords[:-1] == 1)


def test_ulp_distance_refuses_nan_and_shape_mismatch():
    with pytest.raises(ValueError, match="NaN"):
        ulp_distance(from_bits(0x7FC0), from_bits(0x3F80))
    with pytest.raises(ValueError, match="shapes differ"):
        ulp_distance(from_bits(0x3F80, 0x3F80), from_bits(0x3F80))
