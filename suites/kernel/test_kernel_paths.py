"""Kernel layer: every path of the shipped kernel this device can run (portable mma.sync,
tiled mma.sync, Hopper wgmma; chosen with KDTREE_KERNEL_PATH) holds the parity rule and
writes the LSE, on shapes that reach each path's row blocks (16, 32, 64 rows and several
blocks), split KV, chains, mixed batches and boundary-dominant trees. The default path is
also judged by the rest of the layer; this file makes sure no opt-in path ships unjudged.
A path the device cannot run is reported as not run, with the reason."""

import pytest

from kdgate.kernel_run import run_case
from kdgate.verify_inputs import VerifyCase, build_inputs

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]

PATHS = ("portable", "tiled", "wgmma")
CASES = (
    VerifyCase(ctx=(1000,), n=1, heads=8, seed=31),                    # 8 rows
    VerifyCase(ctx=(4097,), n=2, heads=8, tree="chain", seed=32),      # 16 rows, chain
    VerifyCase(ctx=(16384,), n=4, heads=8, seed=33),                   # 32 rows, split KV
    VerifyCase(ctx=(65536,), n=16, heads=8, seed=34),                  # 128 rows, split KV
    VerifyCase(ctx=(4097,), n=64, heads=16, tree="chain", boundary=True, seed=35),
    VerifyCase(ctx=(0, 1, 63, 64, 65, 500, 4097), n=8, heads=8, seed=36,
               indptr_dtype="int64", mask_dtype="uint8"),
    VerifyCase(ctx=(0, 300, 5000), n=33, heads=8, tree="topk", boundary=True, seed=37),
    VerifyCase(ctx=(0, 1, 65, 300, 700, 2048, 4097, 64) * 4, n=16, heads=8, seed=38),  # bs 32 x 128 rows
)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@pytest.mark.parametrize("path", PATHS)
def test_every_kernel_path_holds_parity(candidate, cuda_device, path, case, monkeypatch, gate_notes):
    if candidate.name != "kdtree":
        pytest.skip(f"not run: kernel paths belong to the shipped kernel, not --kernel {candidate.name}")
    from kdtree.verify_op import plan

    monkeypatch.setenv("KDTREE_KERNEL_PATH", path)
    try:
        splits, _, chosen, _ = plan(len(case.ctx), case.heads, case.n, cuda_device)
    except RuntimeError as exc:
        pytest.skip(f"not run: {exc}")
    inputs = build_inputs(case, cuda_device)
    outcome = run_case(candidate, inputs, compare_baseline=False)
    gate_notes.append(f"kernel path {path} (plan {chosen}, {splits} splits) {case.id}: "
                      f"{outcome.report.brief()}")
    assert not outcome.problems(), f"path {path} on {case.id}:\n{outcome.report.summary()}"
    lse_problem = outcome.lse_problem()
    assert lse_problem is None, f"path {path}: {lse_problem}"


def test_shipped_library_runs_its_machine_code_here(candidate, cuda_device):
    """On the GPUs the library has machine code for (sm_90a, sm_120a) the device runs that code,
    not the PTX (which would take the portable path and lose the tuned ones)."""
    if candidate.name != "kdtree":
        pytest.skip(f"not run: the code target belongs to the shipped kernel, not --kernel {candidate.name}")
    import torch

    from kdtree.verify_op import _library, code_capability

    major, minor = torch.cuda.get_device_capability(cuda_device)
    arch = code_capability(_library(), cuda_device.index or 0)
    expected = major * 10 + minor if (major, minor) in ((9, 0), (12, 0)) else 80
    assert arch == expected, f"device {major}.{minor} runs the library's code for {arch}, expected {expected}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_ptx_build_holds_parity_on_the_portable_path(candidate, cuda_device, case, gate_notes):
    """The shipped sources as compute_80 PTX alone, compiled by the driver for this GPU: what an
    A100, L40S or B200 runs. Its plan must take the portable path, which must hold the rule."""
    if candidate.name != "kdtree":
        pytest.skip(f"not run: the PTX build belongs to the shipped kernel, not --kernel {candidate.name}")
    from kdgate.candidates import resolve
    from kdtree.verify_op import _library, code_capability, plan

    lib = _library((), None, (), ("80",))
    assert code_capability(lib, cuda_device.index or 0) == 80, "the PTX-only build should run as compute_80 code"
    splits, _, chosen, _ = plan(len(case.ctx), case.heads, case.n, cuda_device, lib)
    assert chosen == 0, f"the PTX build planned path {chosen}, not the portable path (0)"
    ptx = resolve("kdgate.shipped_builds:portable_ptx")
    outcome = run_case(ptx, build_inputs(case, cuda_device), compare_baseline=False)
    gate_notes.append(f"PTX build (compute_80, portable, {splits} splits) {case.id}: {outcome.report.brief()}")
    assert not outcome.problems(), f"PTX build on {case.id}:\n{outcome.report.summary()}"
    assert outcome.lse_problem() is None, outcome.lse_problem()
