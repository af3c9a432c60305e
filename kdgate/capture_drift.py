"""How a regenerated fixture capture differs from the committed one (make_fixtures --check).

The generator's float math is reproducible on one CPU but not across CPUs. Its fp32
forward's GEMMs (MKL) and vector kernels (ATen) pick their code by instruction set, so a
CPU with another path sums in another order and rounds some bf16 activations the other
way. A regenerated file whose sha256 differs from the manifest's is therefore judged by
what differs:

* ``rounding``: everything discrete is equal (token ids, tree, slots, indices, masks,
  shapes, dtypes, the manifest entry's other fields), each bf16 activation moved by at
  most one bf16 ULP of its row's largest committed magnitude, and the fp64 references,
  recomputed from those activations, moved by at most 2^-8 of the largest value magnitude
  (output) and 2^-8 of |LSE| (LSE). The capture pipeline reproduced; only this CPU's
  rounding differs. (The fp32 values before rounding differ by about 1e-6 of the row's
  scale, so an element moves by one ULP of itself, plus that, in steps of its own
  spacing: at most one ULP of the row's largest, reached when an element of the row's
  top binade flips. On the first CPU seen to differ, an AMD EPYC with AVX2, 5 of the 8
  committed captures reached exactly that, the other 3 0.5.)
* ``different``: anything else.

On the CPU that generated the files the sha256 matches; ``make_fixtures --check --exact``
accepts nothing else.
"""

from __future__ import annotations

import torch

from kdtree.bf16 import bf16_ulp

ACTIVATIONS = ("q", "k_extend", "v_extend", "kv_rows")  # bf16, rows along the last dim
REFERENCES = ("reference_out", "reference_lse")         # fp64, computed from the activations
REFERENCE_BOUND = 2.0 ** -8                              # of the largest value magnitude, or of |LSE|
VALUE_DIMS = 512


def activation_drift(committed: torch.Tensor, regenerated: torch.Tensor) -> float:
    """Largest |Δ| in bf16 ULPs (kdtree.bf16.bf16_ulp) of the row's largest committed
    magnitude (rows = last dim); 0 for an all-zero row that stayed zero, inf for one that
    did not."""
    a, b = committed.double(), regenerated.double()
    row = a.abs().amax(dim=-1, keepdim=True)
    delta = (a - b).abs()
    ratio = torch.where(row > 0, delta / bf16_ulp(row), torch.where(delta > 0, torch.inf, 0.0))
    return float(ratio.max()) if ratio.numel() else 0.0


def compare(committed: dict[str, torch.Tensor], regenerated: dict[str, torch.Tensor],
            committed_entry: dict, regenerated_entry: dict) -> tuple[str, list[str]]:
    """(``"rounding"`` or ``"different"``, one line per finding). The entries are the two
    manifest records; their ``sha256`` fields are not compared."""
    findings: list[str] = []
    strip = {"sha256"}
    meta_a = {k: v for k, v in committed_entry.items() if k not in strip}
    meta_b = {k: v for k, v in regenerated_entry.items() if k not in strip}
    for key in sorted(set(meta_a) | set(meta_b)):
        if meta_a.get(key) != meta_b.get(key):
            findings.append(f"manifest field {key!r} differs")
    if set(committed) != set(regenerated):
        findings.append(f"tensor names differ: {sorted(set(committed) ^ set(regenerated))}")
    verdict = "rounding" if not findings else "different"
    for name in sorted(set(committed) & set(regenerated)):
        a, b = committed[name], regenerated[name]
        if a.dtype != b.dtype or a.shape != b.shape:
            findings.append(f"{name}: {a.dtype}{tuple(a.shape)} against {b.dtype}{tuple(b.shape)}")
            verdict = "different"
            continue
        if torch.equal(a, b):
            continue
        changed = int((a != b).sum())
        if name in ACTIVATIONS:
            drift = activation_drift(a, b)
            findings.append(f"{name}: {changed} of {a.numel()} elements differ, at most {drift:.3f} bf16 ULP "
                            f"of their row's largest magnitude")
            if not drift <= 1.0:
                verdict = "different"
        elif name in REFERENCES:
            if name == "reference_out":
                values = [committed[k][..., :VALUE_DIMS] for k in ("kv_rows", "v_extend") if k in committed]
                scale = max((float(v.double().abs().max()) for v in values if v.numel()), default=0.0)
            else:
                scale = float(a.abs().max())
            moved = float((a - b).abs().max())
            findings.append(f"{name}: {changed} of {a.numel()} elements moved, at most {moved:.3g} "
                            f"({moved / scale / REFERENCE_BOUND if scale else float('inf'):.3f} x 2^-8 of {scale:.3g})")
            if not moved <= REFERENCE_BOUND * scale:
                verdict = "different"
        else:
            findings.append(f"{name}: {changed} of {a.numel()} elements differ (must be equal)")
            verdict = "different"
    return verdict, findings
