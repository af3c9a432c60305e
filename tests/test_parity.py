"""The parity rule on constructed values at known distances."""

import math

import pytest
import torch

from kdtree.bf16 import round_fp64_to_bf16
from kdtree.parity import baseline_problem, check_parity


def bf(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).to(torch.bfloat16)


def d(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def steps(value: float, n: int) -> float:
    """``value`` moved by n bf16 steps (value must be a bf16 number, same binade)."""
    m, e = math.frexp(value)
    return value + n * 2.0 ** (e - 8)


def test_one_ulp_at_the_scale_passes_two_fail():
    ref = d(1.0, 1.0, 1.0)
    out = bf(steps(1.0, 1), 1.0, steps(1.0, -1))
    report = check_parity(out, ref, ref.abs())
    assert report.passed, report.summary()
    assert report.max_ulps == 1.0
    bad = check_parity(bf(steps(1.0, 2), 1.0, 1.0), ref, ref.abs())
    assert not bad.passed
    assert bad.over_tolerance == 1 and bad.max_ulps == 2.0
    assert bad.worst[0].index == (0,) and "exceed" in bad.reasons[0]


def test_power_of_two_boundary_uses_the_scale_binade():
    # ref exactly 2.0: the step below 2.0 is half the step above it.
    ref = d(2.0)
    below = check_parity(bf(2.0 - 2**-7), ref, ref)
    above = check_parity(bf(2.0 + 2**-6), ref, ref)
    assert below.max_ulps == 0.5 and above.max_ulps == 1.0
    assert below.over_tolerance == 0 and above.over_tolerance == 0


def test_negative_values_and_subnormals():
    tiny = 2.0**-130  # subnormal in bf16: spacing 2^-133
    ref = d(-1.5, tiny)
    out = bf(steps(-1.5, -1), tiny + 2**-133)
    report = check_parity(out, ref, ref.abs())
    assert report.passed and report.max_ulps == 1.0
    out2 = bf(-1.5, tiny + 2 * 2**-133)
    assert not check_parity(out2, ref, ref.abs()).passed


def test_signed_zero_is_equal():
    report = check_parity(bf(-0.0), d(0.0), d(0.0))
    assert report.passed and report.max_ulps == 0.0


def test_nan_and_inf_positions_are_checked_first():
    ref = d(math.nan, math.inf, 1.0)
    assert check_parity(bf(math.nan, math.inf, 1.0), ref, d(0, 0, 1)).passed
    for out in (bf(0.0, math.inf, 1.0), bf(math.nan, -math.inf, 1.0), bf(math.nan, math.inf, math.nan)):
        report = check_parity(out, ref, d(0, 0, 1))
        assert not report.passed and report.nonfinite_mismatches == 1
        assert "NaN/Inf" in report.reasons[0]


def test_cancellation_scaled_rule_passes_where_naive_rule_fails():
    # Two values of opposite sign nearly cancel: ref = 0.6·1.0 + 0.4·(−1.49) = 0.004.
    p, v = d(0.6, 0.4), d(1.0, -1.49)
    ref = (p * v).sum().repeat(2)
    scale = (p * v.abs()).sum().repeat(2)
    # A flash-style kernel's error is relative to the magnitude it summed (≈1.2),
    # here ±0.3 ulp at that scale, then one rounding to bf16.
    out = round_fp64_to_bf16(ref + d(0.3, -0.3) * 2**-7)
    report = check_parity(out, ref, scale)
    assert report.passed, report.summary()
    assert 0.25 < report.max_ulps < 0.35
    assert report.naive_max_ulps > 50 and report.naive_over_tolerance == 2


def test_mean_signed_error_catches_a_bias_under_the_per_element_bound():
    # ref 0.2 lives in [0.125, 0.25): its step is 1/8 of the step at scale 1.0.
    n = 64
    ref = torch.full((n,), 0.2, dtype=torch.float64)
    ref_bf = round_fp64_to_bf16(ref).to(torch.float64)
    scale = torch.ones(n, dtype=torch.float64)
    biased = (ref_bf + 3 * 2**-10).to(torch.bfloat16)  # +0.375 scaled ulp everywhere
    report = check_parity(biased, ref, scale)
    assert report.max_ulps == pytest.approx(0.375)
    assert not report.passed and "bias" in report.reasons[0]
    alternating = (ref_bf + 3 * 2**-10 * torch.tensor([1.0, -1.0]).repeat(n // 2)).to(torch.bfloat16)
    assert check_parity(alternating, ref, scale).passed


def test_checked_mask_excludes_padding_rows():
    ref = torch.ones(3, 4, dtype=torch.float64)
    out = ref.to(torch.bfloat16).clone()
    out[2] = math.nan  # a padding row holding garbage
    checked = torch.tensor([True, True, False]).reshape(3, 1)
    report = check_parity(out, ref, ref, checked=checked)
    assert report.passed and report.excluded == 4 and report.checked == 8
    assert not check_parity(out, ref, ref).passed


def test_report_lists_worst_elements_and_histogram():
    ref = torch.ones(10, dtype=torch.float64)
    out = ref.to(torch.bfloat16).clone()
    out[7] = steps(1.0, 3)
    report = check_parity(out, ref, ref)
    assert report.worst[0].index == (7,) and report.worst[0].ulps == 3.0
    assert sum(n for _, _, n in report.histogram) == 10
    assert dict(((lo, hi), n) for lo, hi, n in report.histogram)[(2.0, 4.0)] == 1
    assert "FAIL" in report.summary() and "at [7]" in report.summary()


@pytest.mark.parametrize("kwargs, message", [
    (dict(out=torch.ones(2), reference=d(1, 1), scale=d(1, 1)), "out must be torch.bfloat16"),
    (dict(out=bf(1, 1), reference=torch.ones(2), scale=d(1, 1)), "reference must be torch.float64"),
    (dict(out=bf(1, 1), reference=d(1, 1, 1), scale=d(1, 1)), "reference must have shape"),
    (dict(out=bf(1, 1), reference=d(1, 1), scale=d(1)), "scale must have shape"),
    (dict(out=bf(1, 1), reference=d(1, 1), scale=d(1, -1)), "scale must be finite and >= 0"),
    (dict(out=[1.0], reference=d(1), scale=d(1)), "out must be a torch.Tensor"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        check_parity(**kwargs)


def test_baseline_comparison():
    ref = torch.ones(4, dtype=torch.float64)
    base = check_parity(bf(steps(1, 1), 1, 1, 1), ref, ref)           # 1.0 ulp
    same = check_parity(bf(steps(1, 1), 1, 1, 1), ref, ref)
    assert baseline_problem(same, base) is None
    exact = check_parity(bf(1, 1, 1, 1), ref, ref)
    half = check_parity(bf(1, 1, 1, 1), ref, ref)
    assert baseline_problem(half, exact) is None                      # floor 0.5
    worse = check_parity(bf(steps(1, 3), 1, 1, 1), ref, ref)
    assert "exceeds 2x" in baseline_problem(worse, base)
