"""Which GPU each pytest-xdist worker takes (the logic; the kernel layer shows it on GPUs)."""

import pytest

from kdgate.pytest_gate import gpu_for_worker


@pytest.mark.parametrize("workers, devices, expected", [
    (8, 8, list(range(8))),          # one GPU per worker on an 8-GPU host
    (4, 8, [0, 1, 2, 3]),            # fewer workers than GPUs
    (4, 2, [0, 1, 0, 1]),            # CUDA_VISIBLE_DEVICES=0,1: two workers share each GPU
    (2, 1, [0, 0]),                  # one visible GPU shared
])
def test_each_worker_gets_a_distinct_gpu_when_there_are_enough(workers, devices, expected):
    assert [gpu_for_worker(f"gw{k}", devices) for k in range(workers)] == expected


@pytest.mark.parametrize("worker, devices", [(None, 8), ("", 8), ("master", 8), ("gwx", 8), ("gw0", 0)])
def test_no_pinning_outside_xdist_or_without_gpus(worker, devices):
    assert gpu_for_worker(worker, devices) is None
