"""The bs-1 main kernel's fixed and per-tile time, fitted on benchmark results (no GPU): the
split arithmetic, which cases a fit takes, the floors, the CLI's exit codes (the committed
table of the committed full-matrix run: test_committed_perf_docs.py)."""

from __future__ import annotations

import json

import pytest

from kdgate.nightly import cli
from kdgate.perf_limits import PATH_SHAPES, describe, fit_tiles, main, split_work


def _case(ctx, n, heads, splits, main_us, path="wgmma-64", bs=1, mixed=False) -> dict:
    return {"id": f"bs{bs}-ctx{ctx}-n{n}-h{heads}", "bs": bs, "ctx": ctx, "n": n, "heads": heads, "mixed": mixed,
            "splits": splits, "path": path, "main_us": main_us}


def _result(cases, sms=132) -> dict:
    return {"cases": cases, "environment": {"sms": sms}, "ceilings": {"copy_gbps": 4000.0, "matmul_tflops": 800.0},
            "launch_floor": {"one_kernel_us": 3.4}}


def test_splits_are_cut_as_the_kernel_cuts_them():
    wgmma = PATH_SHAPES["wgmma-64"]
    assert split_work(65536, 66, wgmma) == (16, 64)     # 993 -> 1024 positions, 64 splits busy
    assert split_work(131072, 33, wgmma) == (63, 33)    # 3972 -> 4032; the last split half full
    assert split_work(1024, 132, wgmma) == (2, 8)       # the 128-position minimum
    assert split_work(100, 132, wgmma) == (2, 1)        # one split, its part of a tile counted whole
    assert split_work(1000, 8, PATH_SHAPES["portable"]) == (4, 8)  # 32-position tiles, no minimum


def test_a_fit_recovers_its_line_from_the_cases_that_differ_only_in_tiles():
    tiles = {ctx: split_work(ctx, 66, PATH_SHAPES["wgmma-64"])[0] for ctx in (16384, 65536, 131072)}
    assert list(tiles.values()) == [4, 16, 32]
    line = [_case(ctx, 16, 8, 66, 10.0 + 2.5 * t) for ctx, t in tiles.items()]
    others = [
        _case(1024, 16, 8, 66, 99.0),                  # 8 busy splits of 66: other CTAs at work
        _case(65536, 16, 8, 66, 99.0, mixed=True),     # unequal lengths
        _case(65536, 16, 8, 66, 99.0, bs=4),           # a batch
        _case(65536, 16, 8, 132, 99.0),                # 2 x 132 CTAs: two waves
        _case(65536, 16, 8, 66, 99.0, path="tiled-64"),  # another group, one tile count: no fit
    ]
    [fit] = fit_tiles(_result(line + others))
    assert (fit.path, fit.rows, fit.splits, fit.ctas, fit.tiles, fit.cases) == ("wgmma-64", 128, 66, 128, (4, 16, 32), 3)
    assert fit.fixed_us == pytest.approx(10.0) and fit.per_tile_us == pytest.approx(2.5)
    assert fit.worst_residual_us == pytest.approx(0.0, abs=1e-9)
    # copy: 64 positions x 1152 B x 128 CTAs at 4000 GB/s; matmul: 64 x 64 rows x 2176 FLOP at 800/132 TFLOP/s
    assert fit.copy_floor_us == pytest.approx(64 * 1152 * 128 / 4e6)
    assert fit.matmul_floor_us == pytest.approx(64 * 64 * 2176 / (800e6 / 132))
    assert fit.per_tile_over_floor == pytest.approx(2.5 / fit.copy_floor_us)
    # a slower kernel gives a larger slope, a costlier start a larger intercept
    slower = fit_tiles(_result([dict(c, main_us=c["main_us"] * 2) for c in line]))[0]
    assert slower.per_tile_us == pytest.approx(5.0) and slower.fixed_us == pytest.approx(20.0)


def test_the_table_and_the_cli_exit_codes(tmp_path, capsys):
    line = [_case(ctx, 8, 8, 132, 12.0 + 2.4 * t) for ctx, t in ((16384, 2), (65536, 8), (131072, 16))]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_result(line)))
    assert main([str(path)]) == 0
    text = capsys.readouterr().out
    assert "| wgmma-64 | 64 | 132 | 128 | 2, 8, 16 | 3 | 12.0 | 2.40 |" in text
    assert "the launch floor, 3.40 µs" in text
    assert cli(["limits", str(path)]) == 0
    assert "no bs-1 group" in describe(_result(line[:1]))
    path.write_text(json.dumps({"cases": line}))           # no SM count or ceilings
    assert main([str(path)]) == 2
    (tmp_path / "junk.json").write_text("[1]")
    assert main([str(tmp_path / "junk.json")]) == 2
    assert main([str(tmp_path / "missing.json")]) == 2
    assert main([]) == 2
    assert "not a readable benchmark result" in capsys.readouterr().err
