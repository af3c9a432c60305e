"""Kernel layer negative controls: deliberately broken kernels, run through the same
``--kernel`` path as any candidate, must each be rejected by the layer's own checks."""

import pytest

from kdgate.candidates import resolve
from kdgate.kernel_run import run_case
from kdgate.verify_inputs import VerifyCase, build_inputs

pytestmark = [pytest.mark.kernel, pytest.mark.gpu, pytest.mark.gate_selfcheck]


@pytest.mark.parametrize("name, case", [
    ("mask_shift", VerifyCase(ctx=(100,), n=16, heads=8, boundary=True, seed=41)),
    ("drop_split", VerifyCase(ctx=(65536,), n=16, heads=8, seed=42)),
    # partial values above fp16's range (64 rows: the rows kernel, 132 splits), and below its
    # normal range (128 rows, 66 splits); both calls past the fp16 threshold (split_plan.h)
    ("partial_unscaled", VerifyCase(ctx=(20000,), n=8, heads=8, seed=48, value_scale=2.0 ** 20)),
    ("partial_unscaled", VerifyCase(ctx=(20000,), n=16, heads=8, seed=49, value_scale=2.0 ** -30)),
    # the rows kernel's fp16 build in the short layout writes fp32 values (64 rows, ctx 3000);
    # a combine that ignores the call's recorded format reads them as fp16
    ("call_format_ignored", VerifyCase(ctx=(3000,), n=8, heads=8, seed=50)),
])
def test_broken_kernel_fails_parity(cuda_device, name, case):
    broken = resolve(f"kdgate.broken_kernels:{name}")
    inputs = build_inputs(case, cuda_device)
    outcome = run_case(broken, inputs, compare_baseline=False)
    assert not outcome.report.passed, f"{name} passed parity:\n{outcome.report.summary()}"


def test_stale_lengths_fails_graph_replay(cuda_device):
    """Captured once, replayed with new lengths: the stale copy shows as a mismatch."""
    from ..graph.graph_harness import replay_matches_eager

    broken = resolve("kdgate.broken_kernels:stale_lengths")
    ok, detail = replay_matches_eager(broken, cuda_device, seed=43)
    assert not ok, "stale_lengths replayed like eager: the graph test cannot see stale reads"


@pytest.mark.parametrize("name, suite, select", [
    ("mask_shift", "kernel/test_parity.py", "boundary"),
    ("drop_split", "kernel/test_parity.py", "ctx65536-"),
    ("stale_lengths", "graph/test_graph_replay.py", "replay_matches"),
    ("mask_shift", "kernel/test_tree_paths.py", "ctx20-boundary"),
])
def test_broken_kernel_is_rejected_through_the_kernel_option(name, suite, select):
    """The same layer run as a user would, ``pytest --kernel kdgate.broken_kernels:NAME``:
    it must report failures."""
    import subprocess
    import sys

    from kdgate.shipped import suites_dir

    done = subprocess.run([sys.executable, "-m", "pytest", str(suites_dir() / suite), "-q", "-p", "no:cacheprovider",
                           "-k", select, "--kernel", f"kdgate.broken_kernels:{name}"],
                          capture_output=True, text=True, timeout=600)
    tail = done.stdout[-2000:]
    assert done.returncode == 1 and " failed" in tail, f"{name} was not rejected:\n{tail}"
    assert f"kernel=kdgate.broken_kernels:{name}" in done.stdout
