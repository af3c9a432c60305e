"""Live capture: write verify calls of a running server as fixtures
(kdtree.fixture_format), so a user replays their own model's tensors with
``pytest -m kernel --fixtures-dir DIR``.

Each process writes into its own folder ``KDTREE_CAPTURE_DIR/rank<r>-pid<pid>/`` (TP ranks
never share a manifest). Only eager calls are captured: under CUDA-graph capture the call
is not offered (reading lengths on the host is not allowed there). At most ``max_count``
calls, every ``every``-th eligible one. The fp64 reference is computed at capture time.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import torch

from kdtree.fixture_format import parents_from_mask, save_capture, write_manifest

VALUE_DIM = 512


class CaptureWriter:
    def __init__(self, root: Path, max_count: int, every: int, mode: str):
        self.root = Path(root)
        self.max_count = max_count
        self.every = every
        self.mode = mode
        self.seen = 0
        self.entries: list[dict] = []
        self._lock = threading.Lock()

    def directory(self) -> Path:
        from kdtree.coverage_emitter import current_tp

        rank, _ = current_tp()
        return self.root / f"rank{'x' if rank is None else rank}-pid{os.getpid()}"

    def offer(self, q, k_extend, v_extend, k_buffer, qo_indptr, kv_indptr, kv_indices,
              custom_mask, mask_indptr, max_len_extend: int, sm_scale: float,
              served: torch.Tensor) -> Path | None:
        """Capture this call if it is eligible; returns the written file or None."""
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return None
        with self._lock:
            if len(self.entries) >= self.max_count:
                return None
            self.seen += 1
            if (self.seen - 1) % self.every:
                return None
            return self._write(q, k_extend, v_extend, k_buffer, qo_indptr, kv_indptr, kv_indices,
                               custom_mask, mask_indptr, max_len_extend, sm_scale, served)

    def _write(self, q, k_extend, v_extend, k_buffer, qo_indptr, kv_indptr, kv_indices,
               custom_mask, mask_indptr, max_len_extend, sm_scale, served) -> Path:
        from kdtree.coverage_emitter import current_tp, start_id
        from kdtree.reference import verify_reference

        qo = [int(x) for x in qo_indptr.tolist()]
        kv = [int(x) for x in kv_indptr.tolist()]
        T = qo[-1]
        used = kv_indices[:kv[-1]].to(torch.int64)
        slots = torch.unique(used)
        if custom_mask is None:                     # a chain: write its causal blocks
            blocks, starts = [], [0]
            for b in range(len(qo) - 1):
                n, p = qo[b + 1] - qo[b], kv[b + 1] - kv[b]
                block = torch.ones(n, p + n, dtype=torch.uint8)
                block[:, p:] = torch.ones(n, n, dtype=torch.uint8).tril()
                blocks.append(block.reshape(-1))
                starts.append(starts[-1] + block.numel())
            mask = torch.cat(blocks)
            mask_ptr = torch.tensor(starts, dtype=torch.int64)
        else:
            end = int(mask_indptr[-1])
            mask = custom_mask[:end].to(torch.uint8).cpu()
            mask_ptr = mask_indptr.to(torch.int64).cpu()
        device = q.device
        out, _, lse = verify_reference(q[:T], k_extend[:T], v_extend[:T], k_buffer,
                                       qo_indptr, kv_indptr, used, mask.to(device),
                                       mask_ptr.to(device), sm_scale)
        tensors = {
            "q": q[:T], "k_extend": k_extend[:T], "v_extend": v_extend[:T],
            "kv_rows": k_buffer[slots, 0, :], "kv_slots": slots, "kv_indices": used,
            "qo_indptr": torch.tensor(qo, dtype=torch.int32),
            "kv_indptr": torch.tensor(kv, dtype=torch.int32),
            "custom_mask": mask, "mask_indptr": mask_ptr,
            "reference_out": out, "reference_lse": lse, "served_out": served[:T],
        }
        parents = []
        mp = mask_ptr.tolist()
        for b in range(len(qo) - 1):
            n, p = qo[b + 1] - qo[b], kv[b + 1] - kv[b]
            block = mask[mp[b]:mp[b] + n * (p + n)].reshape(n, p + n)[:, p:]
            parents.append(parents_from_mask(block))
        rank, tp_size = current_tp()
        directory = self.directory()
        name = f"call{len(self.entries):04d}"
        entry = save_capture(directory, name, tensors, {
            "layer": None, "max_len_extend": int(max_len_extend), "bs": len(qo) - 1,
            "ctx": [kv[b + 1] - kv[b] for b in range(len(kv) - 1)], "sm_scale": float(sm_scale),
            "heads": int(q.shape[1]), "kv_buffer_rows": int(k_buffer.shape[0]),
            "parents": parents,
            "provenance": {"captured": "live verify call (KDTREE_CAPTURE_DIR)", "mode": self.mode,
                           "rank": rank, "tp_size": tp_size, "pid": os.getpid(),
                           "start": start_id(),
                           "reference": "kdtree.reference.verify_reference in fp64"}})
        self.entries.append(entry)
        write_manifest(directory, self.entries)
        return directory / entry["file"]
