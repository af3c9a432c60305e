"""CaseOutcome.lse_problem(): the kernel layer's LSE check, on CPU tensors."""

import math

import torch

from kdgate.kernel_run import CaseOutcome


def outcome(lse: list[float], ref: list[float]) -> CaseOutcome:
    none = torch.zeros(1)
    return CaseOutcome(report=None, baseline=None, baseline_error=None, output=none, lse=torch.tensor(lse),
                       reference=none, reference_scale=none, reference_lse=torch.tensor(ref, dtype=torch.float64))


def test_an_lse_within_the_bound_has_no_problem():
    assert outcome([1.0, 2.0005, -math.inf], [1.0, 2.0, -math.inf]).lse_problem() is None


def test_the_bound_scales_with_the_largest_reference_magnitude():
    assert outcome([100.05], [100.0]).lse_problem() is None
    assert "LSE off by" in outcome([100.2], [100.0]).lse_problem()


def test_an_lse_off_by_more_than_the_bound_is_named():
    assert "LSE off by" in outcome([1.0, 2.01], [1.0, 2.0]).lse_problem()


def test_finite_where_the_reference_is_not_is_named():
    assert outcome([0.0], [-math.inf]).lse_problem() == "LSE finite positions differ"
    assert outcome([math.nan], [0.5]).lse_problem() == "LSE finite positions differ"


def test_rows_that_see_nothing_everywhere_have_no_problem():
    assert outcome([-math.inf, -math.inf], [-math.inf, -math.inf]).lse_problem() is None
