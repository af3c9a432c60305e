"""The benchmark's parts that need no GPU: roofline arithmetic, the matrix, the inputs'
layout, the baseline comparison, the CLI's argument checks and the picture."""

from __future__ import annotations

import json
import os

import pytest
import torch

from kdgate import roofline
from kdgate.perf_baseline import compare, load_baseline, write_baseline
from kdgate.perf_bench import main as bench_main
from kdgate.perf_bench import ceiling_sample_points, figure_case, parse_args, select, table
from kdgate.perf_inputs import build_perf_inputs, paged_slots, request_lengths
from kdgate.perf_matrix import PerfCase, matrix
from kdgate.perf_plot import plot_bench
from kdtree.reference import verify_reference

H200 = roofline.Ceilings(copy_gbps=4100.0, matmul_tflops=790.0)


def test_floor_matches_the_documented_h200_figure():
    # shared/notes/gpu-host.md: bs 1, ctx 65536, N 16, H 8 has a floor of about 23 us
    assert roofline.call_bytes([65536], 16) == 65552 * 1152
    assert roofline.call_flops([65536], 16, 8) == 16 * 8 * 65552 * 2176
    assert roofline.floor_us([65536], 16, 8, H200) == pytest.approx(23.1, abs=0.1)
    assert roofline.bound_by([65536], 16, 8, H200) == "compute"
    assert roofline.bound_by([65536], 4, 8, H200) == "memory"


def test_figures_are_ratios_of_the_measured_ceilings():
    floor = roofline.floor_us([16384], 4, 8, H200)
    f = roofline.figures([16384], 4, 8, 2 * floor, H200)
    assert f["roofline_fraction"] == pytest.approx(0.5)
    assert f["bandwidth_fraction"] == pytest.approx(0.5)  # memory-bound: the floor is bandwidth
    assert f["gbps"] == pytest.approx(H200.copy_gbps / 2)
    with pytest.raises(ValueError, match="time_us"):
        roofline.figures([16384], 4, 8, 0.0, H200)
    with pytest.raises(ValueError, match="copy_gbps"):
        roofline.Ceilings(copy_gbps=0, matmul_tflops=1)


def test_the_runs_ceilings_are_each_ceilings_best_sample():
    samples = [roofline.Ceilings(4000.0, 700.0), roofline.Ceilings(4200.0, 650.0), roofline.Ceilings(3900.0, 790.0)]
    assert roofline.best_of(samples) == roofline.Ceilings(4200.0, 790.0)
    assert roofline.best_of(iter(samples[:1])) == samples[0]
    with pytest.raises(ValueError, match="samples"):
        roofline.best_of([])


def test_ceiling_samples_are_spread_over_the_whole_run():
    points = ceiling_sample_points(29, 8)
    assert points == [0, 4, 8, 12, 17, 21, 25, 29]  # before the first case, after the last
    assert len(ceiling_sample_points(146, 8)) == 8  # the same count for the full matrix
    assert ceiling_sample_points(1, 8) == [0, 1] and ceiling_sample_points(0, 8) == [0]
    with pytest.raises(ValueError, match="samples"):
        ceiling_sample_points(29, 1)
    with pytest.raises(ValueError, match="n_cases"):
        ceiling_sample_points(-1, 8)


def test_figures_are_rewritten_against_the_runs_final_ceilings():
    record = {"n": 4, "heads": 8, "kernel": {"median_us": 20.0},
              "paths": {"tiled": {"median_us": 40.0}, "portable": {"error": "does not fit"}}}
    figure_case(record, [16384], H200)
    first = record["figures"]["roofline_fraction"]
    assert record["paths"]["tiled"]["roofline_fraction"] == pytest.approx(first / 2)
    faster_copy = roofline.Ceilings(copy_gbps=2 * H200.copy_gbps, matmul_tflops=H200.matmul_tflops)
    figure_case(record, [16384], faster_copy)  # memory-bound: half the floor
    assert record["figures"]["roofline_fraction"] == pytest.approx(first / 2)
    assert record["paths"]["tiled"]["roofline_fraction"] == pytest.approx(first / 4)
    assert record["paths"]["portable"] == {"error": "does not fit"}


def test_full_matrix_covers_every_axis_of_the_issue():
    cases = matrix("full")
    assert len({c.id for c in cases}) == len(cases)
    assert {c.heads for c in cases} == {8, 16, 128}
    assert {c.n for c in cases} == {1, 2, 4, 8, 16, 32, 64}
    assert {c.shape for c in cases} == {"chain", "tree"}
    assert {c.ctx for c in cases} >= {1024, 4096, 16384, 65536, 131072}
    assert {c.bs for c in cases} == {1, 4, 8, 32, 128}
    assert any(c.mixed for c in cases)
    assert all(c.kv_bytes() <= 24 << 30 for c in cases)
    ci = matrix("ci")
    assert len({c.id for c in ci}) == len(ci) and {c.heads for c in ci} == {8, 16}


@pytest.mark.parametrize("field, value", [("bs", 0), ("n", 65), ("heads", 1.5), ("shape", "ring"), ("ctx", True)])
def test_bad_case_names_the_field(field, value):
    args = dict(bs=1, ctx=1024, n=4, heads=8)
    args[field] = value
    with pytest.raises(ValueError, match=field):
        PerfCase(**args)
    with pytest.raises(ValueError, match="matrix"):
        matrix("huge")


def test_paged_slots_are_whole_permuted_pages_never_slot_zero():
    gen = torch.Generator().manual_seed(3)
    lengths = [100, 1, 64, 300]
    slots, pool = paged_slots(lengths, 64, gen)
    assert slots.numel() == sum(lengths) and len(set(slots.tolist())) == slots.numel()
    assert slots.min() >= 64 and slots.max() < pool  # page 0 (slot 0) is never handed out
    start = 0
    for p in lengths:  # inside a page, slots are consecutive
        run = slots[start:start + p]
        start += p
        assert torch.equal(run % 64, torch.arange(p) % 64)
    pages = torch.unique_consecutive(slots // 64).tolist()
    assert sorted(pages) == list(range(1, len(pages) + 1)) and pages != sorted(pages)  # permuted
    assert request_lengths(PerfCase(64, 1000, 4, 8, mixed=True)) != [1000] * 64
    assert all(1 <= x <= 2000 for x in request_lengths(PerfCase(64, 1000, 4, 8, mixed=True)))


@pytest.mark.parametrize("case", [PerfCase(3, 200, 4, 2, "tree", mixed=True, page_size=16),
                                  PerfCase(2, 130, 3, 2, "chain", page_size=64)], ids=lambda c: c.id)
def test_benchmark_inputs_never_point_at_a_poisoned_slot(case):
    """Unowned slots hold NaN; the contract's reads (the fp64 reference) stay finite, and
    the layout is the one SGLang passes (same checks as the kernel's)."""
    inputs = build_perf_inputs(case, "cpu")
    assert torch.isnan(inputs.k_buffer.float()).any()
    out, _, _ = verify_reference(*inputs.reference_args())
    assert torch.isfinite(out).all()
    assert inputs.q.shape == (case.bs * case.n, case.heads, 576)
    assert inputs.custom_mask.numel() == sum(case.n * (p + case.n) for p in inputs.case.ctx)


def _result(fractions: dict[str, float], gpu="NVIDIA H200") -> dict:
    cases = []
    for case_id, frac in fractions.items():
        cases.append({"id": case_id, "bs": 1, "ctx": 4096, "n": 8, "heads": 8, "shape": "tree",
                      "mixed": False, "kernel": {"median_us": 10.0}, "kernel_output_finite": True,
                      "figures": {"roofline_fraction": frac, "floor_us": 1.0, "gbps": 1.0, "tflops": 1.0,
                                  "bandwidth_fraction": 0.1, "matmul_fraction": 0.1, "bound": "memory"},
                      "combine_share": 0.05, "splits": 4, "extend_us": 100.0, "speedup_extend": 10.0,
                      "verify_shared_us": None, "speedup_verify_shared": None, "rel_l2_vs_triton": 1e-3,
                      "lengths_sum": 4096})
    return {"schema": 1, "environment": {"gpu": gpu, "kernel_build": "x"},
            "ceilings": {"copy_gbps": 4000.0, "matmul_tflops": 800.0}, "cases": cases}


def test_a_drop_beyond_tolerance_fails_and_one_within_passes():
    base = _result({"a": 0.50, "b": 0.50, "gone": 0.3})
    within = compare(_result({"a": 0.46, "b": 0.55, "new": 0.1}), base, 0.10)
    assert within.ok and within.new_cases == ["new"] and within.missing == ["gone"]
    dropped = compare(_result({"a": 0.44, "b": 0.50}), base, 0.10)
    assert not dropped.ok and [d["id"] for d in dropped.drops] == ["a"]
    assert "DROP a" in dropped.describe()
    assert not compare(_result({"zzz": 0.9}), base).ok  # nothing compared is not a pass
    bad = _result({"a": 0.9})
    bad["cases"][0]["kernel_output_finite"] = False
    assert not compare(bad, base).ok
    with pytest.raises(ValueError, match="another GPU"):
        compare(_result({"a": 0.5}, gpu="NVIDIA H100"), base)


def test_runs_timed_by_another_method_are_not_compared():
    base = _result({"a": 0.50})  # no "timing" field: a baseline from before it, flushed
    assert compare({**_result({"a": 0.50}), "timing": "flushed"}, base).ok
    with pytest.raises(ValueError, match="timed flushed, this run code-warm: not comparable"):
        compare({**_result({"a": 0.50}), "timing": "code-warm"}, base)
    warm = {**base, "timing": "code-warm"}
    assert compare({**_result({"a": 0.50}), "timing": "code-warm"}, warm).ok
    with pytest.raises(ValueError, match="timing must be one of"):
        compare({**_result({"a": 0.50}), "timing": "warmish"}, warm)


def test_the_timing_methods_name_what_precedes_a_replay():
    from kdgate.timing_methods import TIMINGS, result_timing, timing_words

    assert set(TIMINGS) == {"flushed", "code-warm", "rotated"}
    assert result_timing({}) == "flushed"
    assert "other inputs" in timing_words("code-warm") and timing_words("flushed") == "after the read flush"
    assert "back to back" in timing_words("rotated") and "no flush" in timing_words("rotated")
    with pytest.raises(ValueError, match="timing must be one of"):
        timing_words("cold")
    assert parse_args([]).timing == "flushed" and parse_args(["--timing", "code-warm"]).timing == "code-warm"
    assert parse_args(["--timing", "rotated"]).timing == "rotated"


def test_a_rotated_case_cycles_through_enough_input_sets_to_exceed_the_l2():
    from kdgate.perf_bench import MAX_ROTATION_SETS, ROTATION_BYTES, rotation_sets

    one_k = 1025 * 1152  # bs 1, ctx 1k, N 1
    assert rotation_sets(one_k) == min(MAX_ROTATION_SETS, -(-ROTATION_BYTES // one_k))
    assert rotation_sets(one_k) * one_k >= ROTATION_BYTES
    assert rotation_sets(18_900_000) * 18_900_000 >= ROTATION_BYTES
    assert rotation_sets(10 << 30) == 2  # never fewer than two: a call never follows itself
    assert rotation_sets(1) == MAX_ROTATION_SETS
    with pytest.raises(ValueError, match="kv_bytes must be positive"):
        rotation_sets(0)


def test_a_rotated_replay_makes_whole_rounds_of_at_least_sixteen_calls():
    from kdgate.perf_bench import MIN_ROTATION_CALLS, rotation_calls

    assert MIN_ROTATION_CALLS == 16
    assert [rotation_calls(k) for k in (1, 2, 3, 5, 16, 17, 256)] == [16, 16, 18, 20, 16, 17, 256]
    with pytest.raises(ValueError, match="sets must be >= 1"):
        rotation_calls(0)


@pytest.mark.parametrize("timing, says", [
    ("code-warm", "on other inputs of the case's shape (timing code-warm); flushed µs:"),
    ("rotated", "Each call timed back to back with calls of the case's shape on other inputs, in one CUDA graph "
                "with no flush (a replay's time ÷ its calls, 16 or more; input sets holding 256 MiB of KV or more; "
                "timing rotated); flushed µs:"),
])
def test_a_table_says_how_each_call_was_timed_and_shows_its_flushed_time(timing, says):
    result = _result({"bs1-ctx4k-n8-h8-tree-p64": 0.4})
    text = table(result)
    assert "Each call timed as one CUDA graph replay after the read flush (timing flushed)." in text
    assert "flushed µs" not in text
    result["timing"] = timing
    result["cases"][0]["kernel_flushed"] = {"median_us": 12.5}
    text = table(result)
    assert says in text
    assert "| case | bound | kernel µs | flushed µs | floor µs |" in text
    assert "| bs1-ctx4k-n8-h8-tree-p64 | memory | 10.0 | 12.5 |" in text


def test_baselines_are_never_replaced(tmp_path):
    path = tmp_path / "perf.json"
    write_baseline(path, _result({"a": 0.5}))
    before = path.read_text()
    with pytest.raises(FileExistsError):
        write_baseline(path, _result({"a": 0.1}))
    assert path.read_text() == before
    assert load_baseline(path)["cases"][0]["id"] == "a"
    (tmp_path / "junk.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="cases"):
        load_baseline(tmp_path / "junk.json")
    with pytest.raises(SystemExit):
        parse_args(["--write-baseline", str(path)])


@pytest.mark.parametrize("argv", [["--reps", "0"], ["--tolerance", "1.5"], ["--matrix", "huge"],
                                  ["--baseline", "/nonexistent.json"], ["--baseline-budget-s", "0"],
                                  ["--paths", "tiled,fastest"], ["--ceiling-samples", "1"],
                                  ["--timing", "warm"]])
def test_bad_cli_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert argv[0] in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_bench_without_a_gpu_says_not_run(tmp_path, capsys):
    assert bench_main(["--matrix", "smoke", "--out", str(tmp_path)]) == 2
    assert "not run: no CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "bench.json").exists()
    assert select(matrix("full"), "ctx128k,h128") and not select(matrix("smoke"), "nomatch")


def test_table_and_picture_from_a_result(tmp_path):
    result = _result({"bs1-ctx4k-n8-h8-tree-p64": 0.4})
    text = table(result)
    assert "bs1-ctx4k-n8-h8-tree-p64" in text and "| 0.40 |" in text
    assert "| 0.05 (-) | 4 |" in text  # a record from before the in-call share says so
    result["cases"][0]["combine_in_call_share"] = 0.031
    assert "| 0.05 (0.03) | 4 |" in table(result)
    assert "Launch floor" not in table(result)
    assert "Ceilings measured in this run: copy 4000 GB/s, bf16 matmul 800 TFLOP/s." in text
    result["ceiling_samples"] = [{"after_cases": 0, "copy_gbps": 3900.0, "matmul_tflops": 800.0},
                                 {"after_cases": 1, "copy_gbps": 4000.0, "matmul_tflops": 700.0}]
    assert ("(the best of 2 samples spread over the run: copy 3900–4000 GB/s, matmul 700–800 TFLOP/s)"
            in table(result))
    result["launch_floor"] = {"one_kernel_us": 3.6, "two_kernels_us": 5.1, "loop_two_kernels_us": 2.32}
    text = table(result)
    assert ("one 1-element kernel 3.6 µs, two 5.1 µs; two per call in a 61-call loop 2.32 µs "
            "per call") in text
    assert "Main kernel at bs 1" not in text  # no SM count: no fit
    result["environment"]["sms"] = 132
    assert "Main kernel at bs 1, fitted as fixed + per tile x tiles" in table(result)
    png = plot_bench(result, tmp_path / "bench.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    json.dumps(result)


def test_path_comparison_table_gives_ratios_and_says_what_did_not_run():
    result = _result({"bs1-ctx4k-n8-h8-tree-p64": 0.4, "bs1-ctx128k-n8-h8-tree-p64": 0.2})
    result["cases"][0]["path"] = "tiled-64"
    result["cases"][0]["paths"] = {"wgmma": {"median_us": 5.0, "path": "wgmma-64", "speedup": 2.0,
                                             "roofline_fraction": 0.8, "max_abs_diff": 0.0078125}}
    result["cases"][1]["paths"] = {"wgmma": {"error": "KDTREE_KERNEL_PATH=wgmma needs 231424 bytes"}}
    text = table(result)
    assert "| bs1-ctx4k-n8-h8-tree-p64 | 10.0 (tiled-64) | 5.0 (wgmma-64) | 2.00 | 0.80 | 7.8e-03 |" in text
    assert "not run: KDTREE_KERNEL_PATH=wgmma needs 231424 bytes" in text
    assert parse_args(["--paths", "tiled,wgmma"]).paths == ("tiled", "wgmma")


def test_kernel_path_override_is_restored(monkeypatch):
    from kdgate.perf_bench import kernel_path

    monkeypatch.setenv("KDTREE_KERNEL_PATH", "portable")
    with kernel_path("wgmma"):
        assert os.environ["KDTREE_KERNEL_PATH"] == "wgmma"
    assert os.environ["KDTREE_KERNEL_PATH"] == "portable"
    monkeypatch.delenv("KDTREE_KERNEL_PATH")
    with pytest.raises(KeyError):
        with kernel_path("tiled"):
            raise KeyError("inside")
    assert "KDTREE_KERNEL_PATH" not in os.environ


def test_bench_environment_names_the_gpu_and_the_kernel_build():
    """What a baseline is matched on (the GPU model) and what it was measured with."""
    from kdgate.perf_bench import environment
    from kdtree.build import build_hash

    env = environment()
    expected_gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (no CUDA GPU)"
    assert env["gpu"] == expected_gpu
    assert env["kernel_build"] == build_hash()
    assert {"torch", "sglang", "triton", "driver", "time"} <= set(env)


def test_context_lines_state_the_launch_floor_and_the_layer_loop():
    from kdgate.perf_bench import context_lines

    assert context_lines({"cases": []}) == []
    lines = context_lines({"launch_floor": {"one_kernel_us": 3.4, "two_kernels_us": 5.0, "loop_two_kernels_us": 2.3},
                           "layer_loop": {"layers": 61, "id": "bs1-ctx1k-n8-h8-tree-p64", "per_call_us": 15.2}})
    assert lines == ["Launch floor, timed like a call: one 1-element kernel 3.4 µs, two 5.0 µs; two per call "
                     "in a 61-call loop 2.30 µs per call.",
                     "Layer loop (61 calls in one CUDA graph, bs1-ctx1k-n8-h8-tree-p64): 15.20 µs per call."]
