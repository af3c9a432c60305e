"""Which committed perf baseline the perf layer takes by default: the one named after the
GPU model it runs on (kdgate.perf_baseline.committed_baseline)."""

from __future__ import annotations

import json

import pytest

from kdgate.perf_baseline import BASELINES, committed_baseline, gpu_model_slug


@pytest.mark.parametrize("gpu, slug", [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"),
                                       ("NVIDIA GeForce RTX 5090", "geforce-rtx-5090"),
                                       ("NVIDIA H100 PCIe", "h100-pcie")])
def test_model_names_become_file_names(gpu, slug):
    assert gpu_model_slug(gpu) == slug


@pytest.mark.parametrize("bad", ["", "NVIDIA", " -- ", None, 7])
def test_a_name_with_nothing_left_is_refused(bad):
    with pytest.raises(ValueError, match="gpu: expected a GPU model name"):
        gpu_model_slug(bad)


def test_the_h200_keeps_its_baseline():
    assert committed_baseline("NVIDIA H200") == BASELINES / "perf-h200-wgmma.json"
    assert committed_baseline("NVIDIA H200").is_file()


def test_a_model_without_one_gets_a_path_that_does_not_exist(tmp_path):
    assert committed_baseline("NVIDIA B200", tmp_path) == tmp_path / "perf-b200-wgmma.json"
    assert not committed_baseline("NVIDIA B200", tmp_path).exists()


@pytest.mark.parametrize("path", sorted(BASELINES.glob("perf-*-wgmma.json")), ids=lambda p: p.name)
def test_each_committed_baseline_is_named_after_its_own_gpu(path):
    gpu = json.loads(path.read_text())["environment"]["gpu"]
    assert committed_baseline(gpu) == path, f"{path.name} was measured on {gpu}"
