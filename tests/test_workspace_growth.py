"""The split-KV workspace grows geometrically: every buffer a growth replaces is kept for
the CUDA graphs captured before it, so they must add up to little (the replay itself is
suites/graph/test_graph_replay.py's, on a GPU)."""

import pytest

from kdtree.verify_op import grown_size

CAP = 1 << 27  # 512 MiB of floats


def test_a_growth_takes_what_is_needed_or_twice_the_old_size_up_to_the_cap():
    assert grown_size(10, 0, CAP) == 10
    assert grown_size(11, 10, CAP) == 20
    assert grown_size(50, 10, CAP) == 50
    assert grown_size(100, CAP - 10, CAP) == CAP
    assert grown_size(CAP + 5, CAP, CAP) == CAP + 5   # past the cap only what is needed
    assert grown_size(0, 0, CAP) == 1


@pytest.mark.parametrize("step", [1, 7, 1000])
def test_kept_buffers_of_many_growths_add_up_to_less_than_the_last(step):
    # a serving engine capturing graphs for batch sizes 1, 2, 3, ... in that order
    sizes, size = [], 0
    for needed in range(step, 400 * step, step):
        if needed > size:
            size = grown_size(needed, size, CAP)
            sizes.append(size)
    assert sum(sizes[:-1]) < sizes[-1]
    assert len(sizes) <= 12


@pytest.mark.parametrize("value, expected", [("512", 512 << 20), ("0", 0), ("0.5078125", 532480)])
def test_the_workspace_budget_is_read_in_mib_fractions_allowed(monkeypatch, value, expected):
    from kdtree.verify_op import workspace_budget_bytes

    monkeypatch.setenv("KDTREE_WORKSPACE_MB", value)
    assert workspace_budget_bytes() == expected


@pytest.mark.parametrize("value", ["-1", "lots", "nan", "inf"])
def test_a_bad_workspace_budget_is_refused_by_name(monkeypatch, value):
    from kdtree.verify_op import workspace_budget_bytes

    monkeypatch.setenv("KDTREE_WORKSPACE_MB", value)
    with pytest.raises(ValueError, match="KDTREE_WORKSPACE_MB must be a number of MiB"):
        workspace_budget_bytes()
