"""The run's measurements (gate notes and figures) survive pytest-xdist: each worker hands
its own to the controller, which prints them all and writes them to --gate-data."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

LAYER = '''
import pytest

@pytest.mark.parametrize("k", range(4))
def test_measures(k, gate_notes, gate_data):
    gate_notes.append(f"measured case {k}: 0.5 ulp")
    gate_data.append({"kind": "probe", "case": k, "ulps": 0.5})
'''


@pytest.mark.parametrize("workers", ["0", "2"])
def test_every_workers_measurements_reach_the_summary_and_the_data_file(tmp_path, workers):
    (tmp_path / "test_layer.py").write_text(LAYER)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")   # none of this repo's settings
    data = tmp_path / "gate-data.json"
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "kdtree_gate", "-p", "no:cacheprovider",
                           "-n", workers, "--gate-data", str(data), "-c", str(tmp_path / "pytest.ini"),
                           str(tmp_path / "test_layer.py")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "PYTHONPATH": f"{repo}:{repo / 'kernels'}"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kdtree-gate measurements" in done.stdout, done.stdout
    for k in range(4):
        assert f"measured case {k}: 0.5 ulp" in done.stdout, done.stdout
    written = json.loads(data.read_text())
    assert sorted(written["notes"]) == [f"measured case {k}: 0.5 ulp" for k in range(4)]
    assert sorted(d["case"] for d in written["data"] if d["kind"] == "probe") == [0, 1, 2, 3]
    outcomes = [d for d in written["data"] if d["kind"] == "test-outcome"]
    assert len(outcomes) == 4 and all(d["outcome"] == "passed" for d in outcomes), outcomes
