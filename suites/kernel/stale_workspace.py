"""Shared by the kernel layer's layout tests (test_batch_layout.py, test_short_layout.py): a
call run right after another of the same shape, which leaves its partial states in the
workspace the two share, so a slot the second call's layout fails to mark as empty is merged
into its output."""

from __future__ import annotations

import pytest

from kdgate.kernel_run import run_case
from kdgate.verify_inputs import VerifyCase, build_inputs


def skip_unless_shipped_kernel(candidate, layout: str) -> None:
    """Skip, saying why, when ``candidate`` is not the shipped kernel, whose ``layout`` it is."""
    if candidate.name != "kdtree":
        pytest.skip(f"not run: the {layout} belongs to the shipped kernel, not --kernel {candidate.name}")


def run_after(candidate, first: VerifyCase, second: VerifyCase, device):
    """The outcomes of ``first`` and then ``second``, run one right after the other."""
    before = run_case(candidate, build_inputs(first, device), compare_baseline=False)
    return before, run_case(candidate, build_inputs(second, device), compare_baseline=False)
