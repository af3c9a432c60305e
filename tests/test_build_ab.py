"""kdtree-gate ab: its arguments, its table, and what it says on a host without a GPU (the
timing itself runs on a GPU host; see docs/perf.md)."""

import pytest

from kdgate import build_ab


def test_builds_are_named_sets_of_defines():
    assert build_ab.parse_build("serial=KDTREE_SERIAL_LAUNCH") == ("serial", ("KDTREE_SERIAL_LAUNCH",))
    assert build_ab.parse_build("both=A+B_2") == ("both", ("A", "B_2"))


@pytest.mark.parametrize("spec", ["KDTREE_SERIAL_LAUNCH", "=A", "x y=A", "shipped=A", "a=", "a=A+", "a=1A", "a=A-B"])
def test_a_bad_build_is_refused_naming_the_option(spec):
    with pytest.raises(ValueError, match="--against"):
        build_ab.parse_build(spec)


def test_default_builds_are_the_kernels_two_switches():
    args = build_ab.parse_args([])
    assert args.builds == {"serial-launch": ("KDTREE_SERIAL_LAUNCH",), "no-balance": ("KDTREE_NO_BALANCE",),
                           "no-trigger": ("KDTREE_MAIN_NO_TRIGGER",)}


@pytest.mark.parametrize("argv, message", [
    (["--against", "a=1X"], "--against"),
    (["--against", "a=X", "--against", "a=Y"], "each NAME once"),
    (["--reps", "0"], "--reps"),
    (["--loop-layers", "-1"], "--loop-layers"),
])
def test_bad_arguments_stop_before_anything_runs(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        build_ab.parse_args(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


RESULT = {
    "builds": {"shipped": [], "serial": ["KDTREE_SERIAL_LAUNCH"]},
    "kernel_build": "0123456789ab",
    "cases": [
        {"id": "bs1-ctx1k-n8-h8-tree-p64", "bs": 1, "ctx": 1024, "us": {"shipped": 18.0, "serial": 18.9},
         "splits": {"shipped": 132, "serial": 132}, "max_abs_diff": {"serial": 0.0}, "finite": True},
        {"id": "bs4-ctx4k-n4-h16-chain-p64", "bs": 4, "ctx": 4096, "us": {"shipped": 20.0, "serial": 20.0},
         "splits": {"shipped": 33, "serial": 33}, "max_abs_diff": {"serial": 0.0}, "finite": True},
    ],
    "layer_loop": {"id": "bs1-ctx1k-n8-h8-tree-p64", "layers": 61, "per_call_us": {"shipped": 15.2, "serial": 16.0}},
}


def test_the_table_gives_each_builds_ratio_to_the_shipped_build():
    text = build_ab.table(RESULT)
    assert "Shipped build 0123456789ab against: serial (-DKDTREE_SERIAL_LAUNCH)" in text
    assert "| bs1-ctx1k-n8-h8-tree-p64 | 132 | 18.0 | 18.9 | 1.050 | 0.0e+00 |" in text
    assert ("serial: × median 1.025 (min 1.000, max 1.050) over 2 cases; the shipped build is faster by more "
            "than 1.5% on 1, slower by more than 1.5% on 0 (× below 1: serial is faster).") in text
    assert "µs per call: shipped 15.20, serial 16.00." in text
    assert "non-finite" not in text


def test_code_warm_is_off_unless_asked_for():
    assert build_ab.parse_args([]).code_warm is False
    assert build_ab.parse_args(["--code-warm"]).code_warm is True


def test_the_table_says_what_preceded_each_timed_replay():
    assert "(replays taking turns, after the read flush)." in build_ab.table(RESULT)  # no field: flushed
    warm = build_ab.table({**RESULT, "timing": "code-warm"})
    assert ("(replays taking turns, after the read flush and one call of the same code on other inputs "
            "of the case's shape).") in warm


def test_a_result_with_an_unknown_timing_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="timing must be one of"):
        build_ab.table({**RESULT, "timing": "warm"})


def test_a_before_hook_for_no_graph_is_refused_before_anything_runs():
    pytest.importorskip("torch")
    from kdgate.gpu_timing import time_interleaved

    with pytest.raises(ValueError, match=r"before names no graph: \['b'\]"):
        time_interleaved({"a": None}, 1, before={"b": lambda: None})


def test_the_table_counts_the_cases_each_way_outside_the_noise():
    cases = [{**RESULT["cases"][0], "us": {"shipped": 20.0, "serial": us}} for us in (19.0, 19.9, 20.2, 21.0)]
    text = build_ab.table({**RESULT, "cases": cases})
    assert "faster by more than 1.5% on 1, slower by more than 1.5% on 1" in text


def test_the_table_summarises_the_ratios_by_batch_split_count_and_context():
    def case(id_, bs, ctx, splits, shipped, serial):
        return {"id": id_, "bs": bs, "ctx": ctx, "us": {"shipped": shipped, "serial": serial},
                "splits": {"shipped": splits, "serial": splits}, "max_abs_diff": {"serial": 0.0}, "finite": True}

    cases = [case("a", 1, 1024, 132, 10.0, 11.0), case("b", 1, 4096, 132, 10.0, 10.5),
             case("c", 1, 65536, 132, 50.0, 50.0), case("d", 1, 65536, 16, 100.0, 99.0),
             case("e", 32, 16384, 4, 300.0, 303.0)]
    text = build_ab.table({**RESULT, "cases": cases})
    rows = [line for line in text.splitlines() if line.startswith("| bs ")]
    assert rows == ["| bs 1, 132 splits, ctx < 16k | 2 | 1.075 (1.050–1.100) |",
                    "| bs 1, 132 splits, ctx >= 16k | 1 | 1.000 (1.000–1.000) |",
                    "| bs 1, 16 splits, ctx >= 16k | 1 | 0.990 (0.990–0.990) |",
                    "| bs > 1, ctx >= 16k | 1 | 1.010 (1.010–1.010) |"]


def test_the_table_says_when_an_output_was_not_finite():
    result = {**RESULT, "cases": [{**RESULT["cases"][0], "finite": False}]}
    assert "non-finite" in build_ab.table(result)


def test_without_a_gpu_it_says_so_and_exits_2(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("not run: this host has a GPU (the command would time the builds)")
    assert build_ab.main(["--matrix", "smoke", "--out", str(tmp_path)]) == 2
    assert "not run: no CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "ab.json").exists()


def test_a_build_is_launched_only_after_the_ops_argument_checks():
    """kdtree-gate ab and the broken kernels launch through verify_op.launch_build, which
    checks the SGLang-form call like the op does before any library is loaded."""
    from kdtree.verify_op import launch_build

    with pytest.raises(ValueError, match="k_scale"):
        launch_build(("KDTREE_SERIAL_LAUNCH",), *([None] * 13), k_scale=2.0)


def test_a_tree_build_is_a_named_source_tree(tmp_path):
    from kdtree import build

    name, root = build_ab.parse_tree_build(f"old={build.source_dir().parent.parent}")
    assert (name, root) == ("old", build.source_dir().resolve())
    args = build_ab.parse_args(["--against-tree", f"old={build.source_dir()}"])
    assert args.builds == {} and args.trees == {"old": build.source_dir().resolve()}
    args = build_ab.parse_args(["--against", "s=KDTREE_SERIAL_LAUNCH", "--against-tree", f"old={build.source_dir()}"])
    assert set(args.builds) == {"s"} and set(args.trees) == {"old"}


@pytest.mark.parametrize("spec, message", [
    ("old", "NAME=DIR"), ("shipped=.", "NAME=DIR"), ("old=", "NAME=DIR"), ("old=/nonexistent/tree", "no kdtree CUDA sources"),
])
def test_a_bad_tree_build_is_refused_naming_the_option(spec, message):
    with pytest.raises(ValueError, match=message) as refused:
        build_ab.parse_tree_build(spec)
    assert "--against-tree" in str(refused.value)


def test_a_name_given_to_a_define_build_and_a_tree_is_refused(capsys):
    from kdtree import build

    with pytest.raises(SystemExit):
        build_ab.parse_args(["--against", "old=X", "--against-tree", f"old={build.source_dir()}"])
    assert "each NAME once" in capsys.readouterr().err


def test_the_table_names_a_tree_build_by_its_path_and_build():
    result = {**RESULT, "builds": {"shipped": [], "old": []},
              "trees": {"old": {"path": "/tmp/head/kernels/csrc", "kernel_build": "8830e7dce51a"}}}
    result["cases"] = [{**c, "us": {"shipped": c["us"]["shipped"], "old": c["us"]["serial"]},
                        "max_abs_diff": {"old": 0.0}} for c in RESULT["cases"]]
    result["layer_loop"] = None
    text = build_ab.table(result)
    assert "old (build 8830e7dce51a of /tmp/head/kernels/csrc)" in text
