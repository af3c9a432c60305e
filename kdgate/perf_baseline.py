"""The committed perf baseline and the comparison the perf layer fails on.

A baseline is a benchmark result (``kdgate.perf_bench`` JSON) saved on purpose. A case
*drops* when its fraction of roofline in this run is below the baseline's by more than
``tolerance`` (relative): fractions are ratios measured within each run (kernel time vs
that run's copy and matmul ceilings), so a slower or faster clock on the same GPU model
moves both sides alike. Runs on a different GPU model, or timed by another method
(kdgate.timing_methods), are not comparable and are refused.
Baselines are never overwritten by this module. The committed baseline of a GPU model is
``baselines/perf-<model>-wgmma.json`` (``committed_baseline()``), so each model's perf layer
finds its own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from kdgate.shipped import data_dir

from kdgate.timing_methods import result_timing

BASELINES = data_dir("baselines")


@dataclass
class PerfVerdict:
    tolerance: float
    compared: list[dict] = field(default_factory=list)     # {id, baseline, now, ratio}
    drops: list[dict] = field(default_factory=list)
    new_cases: list[str] = field(default_factory=list)     # in this run, not in the baseline
    missing: list[str] = field(default_factory=list)       # in the baseline, not in this run
    unusable: list[str] = field(default_factory=list)      # kernel output not finite

    @property
    def ok(self) -> bool:
        return bool(self.compared) and not self.drops and not self.unusable

    def describe(self) -> str:
        lines = [f"Against the baseline (tolerance {self.tolerance:.0%}): {len(self.compared)} cases "
                 f"compared, {len(self.drops)} dropped, {len(self.new_cases)} new, "
                 f"{len(self.missing)} not run."]
        if not self.compared:
            lines.append("No case of this run is in the baseline: nothing was compared.")
        for d in self.drops:
            lines.append(f"- DROP {d['id']}: fraction of roofline {d['now']:.3f} vs baseline "
                         f"{d['baseline']:.3f} ({d['ratio']:.2f}x)")
        for case_id in self.unusable:
            lines.append(f"- BAD {case_id}: the kernel's output was not finite")
        return "\n".join(lines)


def load_baseline(path: Path) -> dict:
    """A saved benchmark result; raises ValueError naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"perf baseline {path}: not a readable JSON file ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise ValueError(f"perf baseline {path}: expected a benchmark result with a 'cases' list")
    return data


def write_baseline(path: Path, result: dict) -> None:
    """Save ``result`` as a new baseline; refuses to replace an existing file."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists: a baseline is replaced only by removing it first")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "x") as sink:
        json.dump(result, sink, indent=1)


def gpu_model_slug(gpu: str) -> str:
    """The file-name form of a GPU model name: "NVIDIA H200" -> "h200",
    "NVIDIA H100 80GB HBM3" -> "h100-80gb-hbm3" (lower case, the vendor dropped, every run of
    other characters one dash). Raises ValueError when nothing is left."""
    if not isinstance(gpu, str):
        raise ValueError(f"gpu: expected a GPU model name (str), got {gpu!r}")
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower().removeprefix("nvidia")).strip("-")
    if not slug:
        raise ValueError(f"gpu: expected a GPU model name, got {gpu!r}")
    return slug


def committed_baseline(gpu: str, directory: Path = BASELINES) -> Path:
    """Where the committed perf baseline of GPU model ``gpu`` lives (it may not exist yet):
    ``directory/perf-<gpu_model_slug(gpu)>-wgmma.json``."""
    return Path(directory) / f"perf-{gpu_model_slug(gpu)}-wgmma.json"


def same_gpu(run: dict, baseline: dict) -> tuple[bool, str]:
    """Whether the two results come from the same GPU model, and the two names."""
    a = run.get("environment", {}).get("gpu")
    b = baseline.get("environment", {}).get("gpu")
    return a == b, f"this run: {a}; baseline: {b}"


def compare(run: dict, baseline: dict, tolerance: float = 0.10) -> PerfVerdict:
    """Case-by-case comparison of fractions of roofline (see the module docstring)."""
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    ok, names = same_gpu(run, baseline)
    if not ok:
        raise ValueError(f"perf baseline is for another GPU model ({names}): not comparable")
    if result_timing(run) != result_timing(baseline):
        raise ValueError(f"perf baseline was timed {result_timing(baseline)}, this run {result_timing(run)}: "
                         "not comparable (time this run with the baseline's --timing)")
    base = {c["id"]: c for c in baseline["cases"]}
    verdict = PerfVerdict(tolerance)
    seen = set()
    for case in run["cases"]:
        seen.add(case["id"])
        if not case.get("kernel_output_finite", True):
            verdict.unusable.append(case["id"])
        old = base.get(case["id"])
        if old is None:
            verdict.new_cases.append(case["id"])
            continue
        now_f = case["figures"]["roofline_fraction"]
        old_f = old["figures"]["roofline_fraction"]
        entry = {"id": case["id"], "baseline": old_f, "now": now_f, "ratio": now_f / old_f}
        verdict.compared.append(entry)
        if now_f < old_f * (1 - tolerance):
            verdict.drops.append(entry)
    verdict.missing = sorted(set(base) - seen)
    return verdict
