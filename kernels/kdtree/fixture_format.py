"""The fixture format (one safetensors file per captured verify call plus manifest.json),
written both by the gate's generator and by the patch's live capture mode.

Tensors of a capture (``TENSORS``; a live capture adds ``served_out``, the output the
server returned):

    q [T, H, 576] bf16, k_extend [T, 1, 576] bf16, v_extend [T, 1, 512] bf16,
    kv_rows [U, 576] bf16 at slot ids kv_slots [U] int64 (each prefix row stored once),
    kv_indices [sum P] int64, qo_indptr / kv_indptr [bs+1] int32,
    custom_mask [sum N(P+N)] uint8, mask_indptr [bs+1] int64,
    reference_out [T, H, 512] f64, reference_lse [T, H] f64

A manifest entry carries at least: name, file, sha256, bytes, max_len_extend, bs, ctx,
sm_scale, heads, kv_buffer_rows (the k_buffer size S), shapes, parents (per request) and
provenance.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MANIFEST = "manifest.json"
TENSORS = ("q", "k_extend", "v_extend", "kv_rows", "kv_slots", "kv_indices", "qo_indptr",
           "kv_indptr", "custom_mask", "mask_indptr", "reference_out", "reference_lse")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_capture(directory: Path, name: str, tensors: dict, entry: dict) -> dict:
    """Write ``tensors`` as ``name``.safetensors (atomically); return ``entry`` completed
    with file, sha256, bytes and shapes."""
    from safetensors.torch import save_file

    missing = [t for t in TENSORS if t not in tensors]
    if missing:
        raise ValueError(f"tensors lacks {missing}")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.safetensors"
    tmp = directory / f".{name}.tmp{os.getpid()}"
    save_file({k: v.contiguous().cpu() for k, v in tensors.items()}, str(tmp))
    os.replace(tmp, path)
    return {**entry, "name": name, "file": path.name, "sha256": sha256_of(path),
            "bytes": path.stat().st_size,
            "shapes": {k: list(v.shape) for k, v in tensors.items()}}


def write_manifest(directory: Path, entries: list[dict]) -> None:
    """Replace manifest.json atomically (a reader never sees a partial file)."""
    tmp = directory / f".{MANIFEST}.tmp{os.getpid()}"
    tmp.write_text(json.dumps({"format": 1, "captures": entries}, indent=1) + "\n")
    os.replace(tmp, directory / MANIFEST)


def parents_from_mask(block) -> list[int]:
    """Parents of a request's drafts from its [N, N] draft block (row i sees its
    ancestors and itself): the nearest ancestor, -1 for a root."""
    n = block.shape[0]
    out = []
    for i in range(n):
        seen = [j for j in range(i) if bool(block[i, j])]
        out.append(max(seen) if seen else -1)
    return out
