"""Kernel layer on captured real tensors: every shipped fixture (and every
--fixtures-dir capture) passes the parity rule; a file whose sha256 does not match its
manifest fails; the stored fp64 reference agrees with a fresh one."""

import pytest
import torch

from kdgate.fixtures import load_capture, read_manifest
from kdgate.kernel_run import run_case

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]


def test_fixture_parity(candidate, cuda_device, fixture_entry, gate_notes, gate_data):
    directory, name = fixture_entry
    entry = next((e for e in read_manifest(directory)["captures"] if e["name"] == name), None)
    assert entry is not None, f"{directory}: manifest has no capture {name}"
    inputs, stored_out, stored_lse = load_capture(directory, entry, cuda_device)
    outcome = run_case(candidate, inputs)
    fresh = outcome.reference.cpu()
    assert torch.allclose(fresh, stored_out, rtol=1e-9, atol=1e-12), \
        f"{name}: stored reference differs from a fresh one by {(fresh - stored_out).abs().max():.3e}"
    rep, base = outcome.report, outcome.baseline

    gate_notes.append(f"fixture {candidate.name} {name}: {rep.brief()} | triton: "
                      + (base.brief() if base else outcome.baseline_error or "n/a"))
    gate_data.append({"kind": "parity", "source": "fixture", "candidate": candidate.name, "case": name,
                      "kernel": rep.figures(), "baseline": base.figures() if base else None})
    assert not outcome.problems(), f"{candidate.name} on fixture {name}:\n{rep.summary()}"
