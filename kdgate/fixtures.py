"""Loading captured verify calls (format: kdtree.fixture_format) for the kernel layer.

Loading checks the file's sha256 against manifest.json first and refuses a file that
does not match; the prefix rows are scattered back into a k_buffer of the recorded size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from kdtree.fixture_format import MANIFEST, TENSORS, sha256_of


class FixtureError(ValueError):
    """A fixture that is missing, altered (sha256 mismatch) or malformed."""


def read_manifest(directory: str | Path) -> dict:
    directory = Path(directory)
    path = directory / MANIFEST
    if not path.is_file():
        raise FixtureError(f"{directory}: no {MANIFEST}")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise FixtureError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(manifest.get("captures"), list) or not manifest["captures"]:
        raise FixtureError(f"{path}: 'captures' must be a non-empty list")
    return manifest


def verify_file(directory: Path, entry: dict) -> Path:
    """The capture's path, after checking it exists and its sha256 matches the manifest."""
    path = directory / entry["file"]
    if not path.is_file():
        raise FixtureError(f"{path}: listed in {MANIFEST} but missing")
    actual = sha256_of(path)
    if actual != entry["sha256"]:
        raise FixtureError(f"{path}: sha256 {actual[:16]}... does not match the manifest's "
                           f"{entry['sha256'][:16]}...: the file was altered or replaced; "
                           f"regenerate it with python -m kdgate.make_fixtures")
    return path


@dataclass(frozen=True)
class FixtureCase:
    """What the verify helpers need to know about a capture (like VerifyCase)."""
    id: str
    n: int
    sm_scale: float
    tree: str = "captured"


def load_capture(directory: str | Path, entry: dict, device="cpu"):
    """(VerifyInputs, reference_out, reference_lse) for one manifest entry."""
    from safetensors.torch import load_file

    from kdgate.verify_inputs import VerifyInputs

    directory = Path(directory)
    path = verify_file(directory, entry)
    tensors = load_file(str(path))
    missing = [t for t in TENSORS if t not in tensors]
    if missing:
        raise FixtureError(f"{path}: lacks tensor(s) {missing}")
    rows = int(entry["kv_buffer_rows"])
    k_buffer = torch.zeros(rows, 1, tensors["kv_rows"].shape[1], dtype=torch.bfloat16)
    k_buffer[tensors["kv_slots"], 0] = tensors["kv_rows"]
    case = FixtureCase(entry["name"], int(entry["max_len_extend"]), float(entry["sm_scale"]))
    to = lambda t: t.to(device)  # noqa: E731
    inputs = VerifyInputs(
        case=case, q=to(tensors["q"]), k_extend=to(tensors["k_extend"]),
        v_extend=to(tensors["v_extend"]), k_buffer=to(k_buffer),
        qo_indptr=to(tensors["qo_indptr"]), kv_indptr=to(tensors["kv_indptr"]),
        kv_indices=to(tensors["kv_indices"]), custom_mask=to(tensors["custom_mask"]),
        mask_indptr=to(tensors["mask_indptr"]), parents=entry.get("parents", []))
    return inputs, tensors["reference_out"], tensors["reference_lse"]
