"""Kernel layer under ``pytest -n N`` (pytest-xdist): each worker runs on its own GPU
(worker gwK on visible device K mod count)."""

import os

import pytest
import torch

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]


@pytest.mark.gate_selfcheck
def test_worker_runs_on_its_own_gpu(gate_notes):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        pytest.skip("not run: not under pytest-xdist (run with -n N to check GPU pinning)")
    from kdgate.pytest_gate import gpu_for_worker

    count = torch.cuda.device_count()
    want = gpu_for_worker(worker, count)
    got = torch.cuda.current_device()
    x = torch.ones(4, device="cuda")
    print(f"xdist worker {worker}: cuda:{got} of {count} visible "
          f"({torch.cuda.get_device_name(got)}, CUDA_VISIBLE_DEVICES="
          f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}, pci {torch.cuda.get_device_properties(got).pci_bus_id})")
    assert got == want and x.device.index == want, f"worker {worker} on cuda:{got}, expected cuda:{want}"
