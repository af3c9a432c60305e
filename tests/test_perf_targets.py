"""Issue #7's targets on benchmark results (no GPU): each target's threshold and the cases
it applies to, the launch-floor bound, the CLI's exit codes (the committed summary of the
committed full-matrix run: test_committed_perf_docs.py)."""

from __future__ import annotations

import json

from kdgate import roofline
from kdgate.nightly import cli
from kdgate.perf_targets import TARGETS, evaluate, main

CEILINGS = roofline.Ceilings(copy_gbps=4000.0, matmul_tflops=800.0)


def _case(bs, ctx, n, heads, shape, time_us, **extra) -> dict:
    case_id = f"bs{bs}-ctx{ctx // 1024}k-n{n}-h{heads}-{shape}-p64"
    record = {"id": case_id, "bs": bs, "ctx": ctx, "n": n, "heads": heads, "shape": shape, "mixed": False,
              "kernel": {"median_us": time_us},
              "figures": roofline.figures([ctx] * bs, n, heads, time_us, CEILINGS),
              "combine_share": 0.05, "combine_in_call_share": 0.05, "speedup_extend": 300.0,
              "speedup_verify_shared": 2.0 if shape == "chain" else None}
    record.update(extra)
    return record


def _result(cases, loop_us=9.0, launch_us=3.4) -> dict:
    return {"cases": cases, "launch_floor": {"one_kernel_us": launch_us},
            "layer_loop": {"per_call_us": loop_us}}


def _outcome(result, key):
    outcomes, _ = evaluate(result)
    return next(o for o in outcomes if o.target.key == key)


def test_memory_bound_cases_need_080_of_copy_and_short_ones_are_out_of_reach():
    floor_64k = roofline.floor_us([65536], 1, 8, CEILINGS)
    floor_16k = roofline.floor_us([16384], 1, 8, CEILINGS)
    fast = _case(1, 65536, 1, 8, "chain", floor_64k / 0.85)   # 0.85 of copy
    slow = _case(1, 131072, 1, 8, "chain", 2 * roofline.floor_us([131072], 1, 8, CEILINGS))  # 0.50
    short = _case(1, 16384, 1, 8, "chain", floor_16k / 0.5)    # 4.7 us floor: at most 0.58 with 3.4 us
    result = _result([fast, slow, short, _case(1, 4096, 1, 8, "chain", 5.0)])  # ctx 4k: not a long case
    out = _outcome(result, "memory")
    assert out.met == [fast["id"]] and sorted(i for i, _ in out.unmet) == sorted([short["id"], slow["id"]])
    assert out.out_of_reach == [short["id"]]  # the 128k case could reach 0.80; the 16k case cannot
    assert _outcome(_result([short], launch_us=0.5), "memory").out_of_reach == []  # a lower floor would allow it
    assert _outcome(result, "compute").cases == 0  # N·H = 8 is not compute-bound


def test_compute_roofline_speedup_combine_and_loop_thresholds():
    def compute_case(fraction, n=16, heads=8):
        return _case(1, 65536, n, heads, "tree", roofline.floor_us([65536], n, heads, CEILINGS) / fraction)

    at, below = compute_case(0.56), compute_case(0.54, n=32)
    result = _result([at, below])
    assert _outcome(result, "compute").met == [at["id"]]
    assert _outcome(result, "roofline").met == [] and len(_outcome(result, "roofline").unmet) == 2
    extend_case = _case(1, 65536, 16, 8, "tree", 60.0, speedup_extend=171.0)
    assert _outcome(_result([extend_case]), "extend").unmet == [(extend_case["id"], 171.0)]
    chain = _case(1, 4096, 4, 8, "chain", 20.0, speedup_verify_shared=1.4)
    assert _outcome(_result([chain]), "chains").unmet == [(chain["id"], 1.4)]
    no_shared = _case(1, 4096, 4, 8, "chain", 20.0, speedup_verify_shared=None)
    assert _outcome(_result([no_shared]), "chains").not_measured == [no_shared["id"]]
    heavy = _case(1, 65536, 8, 8, "tree", 40.0, combine_share=0.2, combine_in_call_share=0.08)
    assert _outcome(_result([heavy]), "combine").unmet == [(heavy["id"], 0.2)]
    assert _outcome(_result([heavy]), "combine-in-call").met == [heavy["id"]]
    assert evaluate(_result([], loop_us=10.0))[1]["met"] and not evaluate(_result([], loop_us=10.5))[1]["met"]
    assert evaluate({"cases": []})[1] is None


def test_the_table_names_every_target_and_the_cli_exit_codes(tmp_path, capsys):
    ok = _case(1, 65536, 1, 8, "chain", roofline.floor_us([65536], 1, 8, CEILINGS) / 0.9)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_result([ok])))
    assert main([str(path)]) == 0
    text = capsys.readouterr().out
    assert "| ctx >= 16k, memory-bound (N·H <= 64): >= 0.80 of the copy bandwidth | 1/1 | 0 | - |" in text
    assert "<= 10 µs per call | yes (9.00 µs)" in text
    path.write_text(json.dumps(_result([ok], loop_us=15.0)))
    assert cli(["targets", str(path)]) == 1
    (tmp_path / "junk.json").write_text("[1]")
    assert main([str(tmp_path / "junk.json")]) == 2
    assert main([str(tmp_path / "missing.json")]) == 2
    assert main([]) == 2
    assert "not a readable benchmark result" in capsys.readouterr().err
    assert len({t.key for t in TARGETS}) == len(TARGETS)
