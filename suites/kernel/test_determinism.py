"""Kernel layer: bitwise-identical outputs over 10 runs (compared as int16 views)."""

import pytest
import torch

from kdgate.kernel_run import run_candidate
from kdgate.verify_inputs import VerifyCase, build_inputs

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]


@pytest.mark.parametrize("case", [VerifyCase(ctx=(65536,), n=16, heads=8, seed=31),
                                  VerifyCase(ctx=(0, 4097, 300), n=33, heads=16, seed=32)],
                         ids=lambda c: c.id)
def test_ten_runs_are_bitwise_identical(candidate, cuda_device, case):
    inputs = build_inputs(case, cuda_device)
    first, _ = run_candidate(candidate, inputs, False)
    for run in range(9):
        again, _ = run_candidate(candidate, inputs, False)
        same = torch.equal(first.view(torch.int16), again.view(torch.int16))
        assert same, f"run {run + 2} differs from run 1 in " \
                     f"{int((first.view(torch.int16) != again.view(torch.int16)).sum())} elements"
