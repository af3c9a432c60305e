"""Resolving ``--kernel`` specs (CPU: nothing is launched)."""

import pytest

from kdgate.candidates import resolve


def test_default_and_named_candidates():
    assert resolve(None).name == "kdtree" and resolve("kdtree").static_checks
    triton = resolve("triton")
    assert triton.name == "triton" and not triton.static_checks and not triton.debug_checks


def test_module_and_file_candidates(tmp_path):
    broken = resolve("kdgate.broken_kernels:mask_shift")
    assert broken.name == "kdgate.broken_kernels:mask_shift" and broken.writes_lse
    assert broken.fn.defines == ("KDTREE_FAULT_MASK_SHIFT",)
    source = tmp_path / "my_kernel.py"
    source.write_text("def fwd(*args, **kwargs):\n    return True\nfwd.writes_lse = True\n")
    mine = resolve(f"{source}:fwd")
    assert mine.fn() is True and mine.writes_lse and not mine.debug_checks


@pytest.mark.parametrize("spec, message", [
    ("no_colon", "must be 'kdtree', 'triton'"),
    ("kdgate.broken_kernels:absent", "has no callable 'absent'"),
    ("/nonexistent/file.py:fwd", "no file"),
])
def test_bad_specs_are_named(spec, message):
    with pytest.raises(ValueError, match=message):
        resolve(spec)
