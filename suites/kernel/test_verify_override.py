"""KDTREE_VERIFY on the GPU: the verify slot the plugin installs in TritonAttnBackend,
called the way SGLang's forward_extend calls it (extend_attention_fwd's arguments plus
max_bs), eager and inside CUDA graphs, in modes on and validate; and live capture
written as fixtures and replayed by the kernel layer."""

import logging
import subprocess
import sys

import pytest
import torch

from kdgate.baselines import triton_extend_attention
from kdgate.candidates import resolve
from kdgate.fixtures import load_capture, read_manifest
from kdgate.kernel_run import run_case
from kdgate.verify_inputs import VerifyCase, build_inputs
from kdtree.capture import CaptureWriter
from kdtree.parity import check_parity
from kdtree.reference import verify_reference
from kdtree.verify_override import Validator, VerifySlot
from ..graph.graph_harness import replay_matches_eager

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]

EAGER = VerifyCase(ctx=(900, 0, 4097), n=16, heads=16, seed=101)   # int32 qo, bool mask


def sglang_extend(*args, **kwargs):
    from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

    return extend_attention_fwd(*args, **kwargs)


def call_slot(slot, inputs, o):
    args, kwargs = inputs.call_args(o)
    return slot(*args[:15], kwargs["sm_scale"], logit_cap=0.0, sliding_window_size=-1, sinks=None,
                window_kv_offsets=None, xai_temperature_len=-1, max_bs=len(inputs.case.ctx))


def test_on_mode_serves_the_kernel(cuda_device):
    inputs = build_inputs(EAGER, cuda_device)
    slot = VerifySlot("on", sglang_extend)
    o = inputs.new_output()
    assert call_slot(slot, inputs, o) is True and slot.calls == {"kernel": 1, "fallback": 0}
    ref, scale, _ = verify_reference(*inputs.reference_args())
    report = check_parity(o, ref, scale)
    assert report.passed, report.summary()
    direct = inputs.new_output()
    args, kwargs = inputs.call_args(direct)
    resolve("kdtree")(*args, **kwargs)
    assert torch.equal(o.view(torch.int16), direct.view(torch.int16))


def test_unsupported_call_falls_back(cuda_device):
    inputs = build_inputs(EAGER, cuda_device)
    slot = VerifySlot("on", sglang_extend)
    o = inputs.new_output()
    args, kwargs = inputs.call_args(o)
    assert slot(*args[:15], kwargs["sm_scale"], logit_cap=30.0) is False
    assert slot.calls == {"kernel": 0, "fallback": 1}
    assert torch.isnan(o.float()).all(), "a declined call must not write o"


def test_validate_mode_serves_triton_and_passes(cuda_device):
    inputs = build_inputs(EAGER, cuda_device)
    slot = VerifySlot("validate", sglang_extend)
    o = inputs.new_output()
    assert call_slot(slot, inputs, o) is True
    triton = inputs.new_output()
    args, kwargs = inputs.call_args(triton)
    triton_extend_attention(*args, **kwargs)
    assert torch.equal(o.view(torch.int16), triton.view(torch.int16)), "validate must serve Triton's output"
    assert slot.validator.compared == 1 and slot.validator.mismatches == 0


@pytest.mark.gate_selfcheck
def test_validate_mode_reports_a_broken_kernel(cuda_device, caplog):
    inputs = build_inputs(VerifyCase(ctx=(100,), n=16, heads=8, boundary=True, seed=102), cuda_device)
    broken = resolve("kdgate.broken_kernels:mask_shift").fn
    slot = VerifySlot("validate", sglang_extend, validator=Validator(0), kernel=broken)
    with caplog.at_level(logging.WARNING, logger="kdtree"):
        call_slot(slot, inputs, inputs.new_output())
    assert slot.validator.mismatches == 1
    text = caplog.text
    assert "fails the parity rule" in text and "worst at" in text, text


@pytest.mark.parametrize("mode", ["on", "validate"])
def test_slot_inside_cuda_graph(cuda_device, mode):
    """int64 indptrs, uint8 mask, padded requests; captured once, replayed on new inputs."""
    slot = VerifySlot(mode, sglang_extend)
    ok, detail = replay_matches_eager(slot, cuda_device, seed=103)
    assert ok, detail
    if mode == "validate":
        slot.validator.report_graph_stat()
        worst = slot.validator.graph_worst
        assert worst <= 2.0, f"kernel vs served inside the graph: {worst} ulp"
        assert slot.validator.compared >= 3 and slot.validator.mismatches == 0


@pytest.mark.gate_selfcheck
def test_validate_in_graph_sees_a_broken_kernel(cuda_device):
    broken = resolve("kdgate.broken_kernels:mask_shift").fn
    slot = VerifySlot("validate", sglang_extend, kernel=broken)
    replay_matches_eager(slot, cuda_device, seed=104, boundary=True)
    slot.validator.report_graph_stat()
    worst = slot.validator.graph_worst
    assert worst > 2.0, f"the broken kernel went unnoticed in the graph ({worst} ulp)"


def test_capture_round_trip(cuda_device, tmp_path):
    writer = CaptureWriter(tmp_path, max_count=2, every=1, mode="on")
    slot = VerifySlot("on", sglang_extend, capture=writer)
    served = []
    for seed in (105, 106, 107):
        inputs = build_inputs(VerifyCase(ctx=(700, 33), n=8, heads=16, seed=seed), cuda_device)
        o = inputs.new_output()
        call_slot(slot, inputs, o)
        served.append(o.cpu())
    directory = writer.directory()
    manifest = read_manifest(directory)
    assert len(manifest["captures"]) == 2, "max_count=2 must stop the third capture"
    for entry, o in zip(manifest["captures"], served):
        inputs, stored_out, _ = load_capture(directory, entry, cuda_device)
        outcome = run_case(resolve("kdtree"), inputs, compare_baseline=False)
        assert outcome.report.passed, outcome.report.summary()
    from safetensors.torch import load_file
    first = load_file(str(directory / manifest["captures"][0]["file"]))
    assert torch.equal(first["served_out"].view(torch.int16), served[0].view(torch.int16))
    # and the kernel layer replays the folder as a user would
    from kdgate.shipped import suites_dir

    done = subprocess.run([sys.executable, "-m", "pytest", str(suites_dir() / "kernel" / "test_fixtures.py"), "-q",
                           "-p", "no:cacheprovider", "-k", directory.name,
                           "--fixtures-dir", str(directory)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-2000:]
