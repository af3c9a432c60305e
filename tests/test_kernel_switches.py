"""The registry of the kernel's compile switches (kernels/csrc/switches.h, read by
kdtree.switches) is complete and every switch in it compiles: a name an #if tests that the
registry lacks fails here, as does a registered switch whose code no longer builds."""

import shutil

import pytest

from kdtree import build, switches


def test_every_entry_of_the_header_is_read():
    """An entry written out of form (say an unquoted text) would drop out of the registry."""
    text = (build.source_dir() / switches.HEADER).read_text()
    assert len(switches.registry()) == text.count("  X(KDTREE_") > 0


def test_names_are_unique_and_kinds_known():
    names = [s.name for s in switches.registry()]
    assert len(names) == len(set(names))
    assert {s.kind for s in switches.registry()} <= set(switches.KINDS)
    assert all(s.what for s in switches.registry())


def test_every_name_an_if_tests_is_registered():
    tested = switches.tested_names(build.source_dir())
    registered = {s.name for s in switches.registry()}
    unlisted = {name: places for name, places in tested.items() if name not in registered}
    assert not unlisted, f"switches tested in kernels/csrc but not in switches.h: {unlisted}"


def test_every_registered_switch_is_read_by_the_sources():
    tested = switches.tested_names(build.source_dir())
    unread = [s.name for s in switches.registry() if s.name not in tested]
    assert not unread, f"registered switches no #if reads (remove them): {unread}"


def test_an_unlisted_switch_is_found(tmp_path):
    """Negative control: a copy of the sources with one more switch is reported."""
    tree = tmp_path / "csrc"
    shutil.copytree(build.source_dir(), tree)
    path = tree / "common" / "mma.cuh"
    path.write_text(path.read_text() + "\n#if defined(KDTREE_UNLISTED) && !defined(X)\n#endif\n")
    tested = switches.tested_names(tree)
    line = path.read_text().splitlines().index("#if defined(KDTREE_UNLISTED) && !defined(X)") + 1
    assert tested["KDTREE_UNLISTED"] == [f"common/mma.cuh:{line}"]


def test_the_shipped_builds_use_registered_switches_only():
    with pytest.raises(KeyError, match="KDTREE_MASK_SHIFT is not a kdtree compile switch"):
        switches.by_name("KDTREE_MASK_SHIFT")
    from kdgate import broken_kernels, shipped_builds

    for module in (broken_kernels, shipped_builds):
        for value in vars(module).values():
            for name in getattr(value, "defines", ()):
                assert switches.by_name(name)


@pytest.mark.parametrize("switch", switches.registry(), ids=lambda s: s.name)
def test_each_switch_compiles(tmp_path, switch):
    """sm_90a machine code holds every path (portable, tiled, wgmma), so one target builds
    every branch a switch selects."""
    try:
        build.nvcc_path()
    except FileNotFoundError as exc:
        pytest.skip(f"not run: {exc}")
    out = tmp_path / build.LIBRARY
    build.compile_library(out, targets=("90a",), defines=(switch.name,), ptx=())
    assert out.stat().st_size > 10_000
