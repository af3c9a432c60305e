"""Perf layer: the kernel's fraction of the roofline per case, against a baseline
(``--perf-baseline``; by default the committed one of this GPU model,
``baselines/perf-<model>-wgmma.json``), measured by the benchmark in this process with the
baseline's timing method; a slowed kernel (no KV split) must be flagged."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdgate.perf_baseline import committed_baseline, compare, load_baseline, same_gpu
from kdgate.perf_bench import context_lines
from kdgate.perf_targets import describe
from kdgate.perf_matrix import PerfCase, matrix
from kdgate.timing_methods import result_timing

pytestmark = pytest.mark.perf

# the negative control: long-context batch-1 cases, where one CTA per row block is far
# from filling the GPU
SLOWED_CASES = (PerfCase(1, 128 * 1024, 8, 8, "tree"), PerfCase(1, 128 * 1024, 4, 16, "chain"))


@pytest.fixture(scope="module")
def gpu_model(cuda_device) -> str:
    import torch

    return torch.cuda.get_device_properties(cuda_device).name


@pytest.fixture(scope="module")
def baseline(pytestconfig, gpu_model) -> dict:
    """The named baseline (missing: a failure), or this GPU model's committed one (none
    committed: the layer is not run, and says how to record one)."""
    named = pytestconfig.getoption("--perf-baseline")
    path = Path(named) if named else committed_baseline(gpu_model)
    if not path.is_file():
        how = f"record one with `kdtree-gate bench --matrix ci --write-baseline {path}` and commit it"
        if named:
            pytest.fail(f"no perf baseline at {path} (--perf-baseline): {how}")
        pytest.skip(f"not run: no perf baseline committed for {gpu_model} ({path}): {how}")
    return load_baseline(path)


@pytest.fixture(scope="module")
def perf_run(pytestconfig, gpu_model, baseline) -> dict:
    from kdgate.perf_bench import run

    ok, names = same_gpu({"environment": {"gpu": gpu_model}}, baseline)
    if not ok:
        pytest.skip(f"not run: the perf baseline is for another GPU model ({names})")
    return run(matrix(pytestconfig.getoption("--perf-matrix")), reps=20, baseline_budget_s=0.5,
               progress=lambda line: print(line, flush=True), timing=result_timing(baseline))


def test_fraction_of_roofline_holds_against_baseline(perf_run, baseline, pytestconfig, gate_notes, gate_data):
    tolerance = pytestconfig.getoption("--perf-tolerance")
    verdict = compare(perf_run, baseline, tolerance)
    for case in perf_run["cases"]:
        gate_data.append({"kind": "perf", "id": case["id"], "bs": case["bs"], "ctx": case["ctx"],
                          "n": case["n"], "heads": case["heads"], "shape": case["shape"],
                          "mixed": case["mixed"], "kernel_us": case["kernel"]["median_us"],
                          "roofline_fraction": case["figures"]["roofline_fraction"],
                          "speedup": case["speedup_extend"], "combine_share": case["combine_share"],
                          "combine_in_call_share": case["combine_in_call_share"]})
    gate_notes.append(verdict.describe())
    gate_notes.extend(context_lines(perf_run))  # the report states them beside the verdict
    gate_notes.append(describe(perf_run))       # issue #7's targets on this run (informative)
    for kind in ("launch_floor", "layer_loop"):
        if perf_run.get(kind):
            gate_data.append({"kind": f"perf-{kind.replace('_', '-')}", **perf_run[kind]})
    assert verdict.ok, verdict.describe()



def test_kernel_agrees_with_triton_on_every_benchmark_input(perf_run):
    bad = [(c["id"], c["rel_l2_vs_triton"]) for c in perf_run["cases"]
           if not c["kernel_output_finite"] or c["rel_l2_vs_triton"] is None or not c["rel_l2_vs_triton"] < 2e-2]
    assert not bad, f"kernel output differs from SGLang's Triton kernel (relative L2) on: {bad}"


@pytest.mark.gate_selfcheck
def test_a_slowed_kernel_is_flagged(perf_run, baseline, monkeypatch, pytestconfig):
    """Negative control: with no workspace the kernel cannot split the KV (one CTA per row
    block); the comparison must report the drop."""
    from kdgate.perf_bench import run

    ids = {c["id"] for c in baseline["cases"]}
    cases = [c for c in SLOWED_CASES if c.id in ids]
    assert cases, f"the baseline holds none of the control's cases {[c.id for c in SLOWED_CASES]}"
    monkeypatch.setenv("KDTREE_WORKSPACE_MB", "0")
    slowed = run(cases, reps=5, baselines=False, progress=lambda line: None, with_layer_loop=False,
                 timing=result_timing(baseline))
    verdict = compare(slowed, baseline, pytestconfig.getoption("--perf-tolerance"))
    assert {d["id"] for d in verdict.drops} == {c.id for c in cases}, verdict.describe()
