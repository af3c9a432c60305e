"""The fp64 reference of the verify-attention contract (CPU or GPU).

Same semantics as the kernel: for request b with prefix length P and N draft tokens,
row (draft i, head h) attends to every prefix slot ``kv_indices[kv_indptr[b] + j]`` of
``k_buffer`` and to draft d (K from ``k_extend``, V from ``v_extend`` at row
``qo_indptr[b] + d``) where ``custom_mask[mask_indptr[b] + i*(P+N) + P + d] != 0`` (no
mask: d <= i). With ``is_causal`` (SGLang's verify passes True) a draft never sees a
later one even where the mask is set. Scores are ``sm_scale * q.k`` over 576 dims; V is the first 512 dims of
the key row (prefix) or ``v_extend`` (drafts). Computed in fp64 on the bf16 inputs.

Returns fp64 ``out`` [T, H, 512], ``scale`` = Σ p·|v| [T, H, 512] (what the parity rule
measures ULPs at) and ``lse`` [T, H] (natural log of Σ exp(score)). A row with no
visible key has out 0, scale 0 and lse -inf. Rows of T that belong to no request are 0.
"""

from __future__ import annotations

import torch

VALUE_DIM = 512


def verify_reference(q, k_extend, v_extend, k_buffer, qo_indptr, kv_indptr, kv_indices,
                     custom_mask, mask_indptr, sm_scale: float, *, is_causal: bool = True,
                     max_chunk_bytes: int = 1 << 29):
    """fp64 reference on the device of ``q``; see the module docstring."""
    device = q.device
    T, H, _ = q.shape
    out = torch.zeros(T, H, VALUE_DIM, dtype=torch.float64, device=device)
    scale = torch.zeros_like(out)
    lse = torch.full((T, H), float("-inf"), dtype=torch.float64, device=device)
    qo = qo_indptr.tolist()
    kv = kv_indptr.tolist()
    mk = mask_indptr.tolist() if custom_mask is not None else None
    for b in range(len(qo) - 1):
        q0, n = qo[b], qo[b + 1] - qo[b]
        if n <= 0:
            continue
        prefix = kv[b + 1] - kv[b]
        slots = kv_indices[kv[b]:kv[b + 1]].to(device)
        keys = torch.cat((k_buffer[slots, 0, :].double(), k_extend[q0:q0 + n, 0, :].double()))
        values = torch.cat((k_buffer[slots, 0, :VALUE_DIM].double(),
                            v_extend[q0:q0 + n, 0, :].double()))
        length = prefix + n
        visible = torch.ones(n, length, dtype=torch.bool, device=device)
        if custom_mask is not None:
            block = custom_mask[mk[b]:mk[b] + n * length].to(device).reshape(n, length)
            visible[:, prefix:] = block[:, prefix:] != 0
            if is_causal:
                visible[:, prefix:] &= torch.ones(n, n, dtype=torch.bool, device=device).tril()
        else:
            visible[:, prefix:] = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        queries = q[q0:q0 + n].double()                                # [n, H, 576]
        rows_per_chunk = max(1, max_chunk_bytes // (8 * length * H))
        for i0 in range(0, n, rows_per_chunk):
            i1 = min(n, i0 + rows_per_chunk)
            scores = torch.einsum("ihd,jd->ihj", queries[i0:i1], keys) * sm_scale
            scores = scores.masked_fill(~visible[i0:i1, None, :], float("-inf"))
            row_max = scores.amax(dim=-1, keepdim=True)
            finite = torch.isfinite(row_max)
            weights = torch.exp(scores - torch.where(finite, row_max, torch.zeros_like(row_max)))
            total = weights.sum(dim=-1, keepdim=True)
            p = torch.where(total > 0, weights / total, torch.zeros_like(weights))
            out[q0 + i0:q0 + i1] = torch.einsum("ihj,jd->ihd", p, values)
            scale[q0 + i0:q0 + i1] = torch.einsum("ihj,jd->ihd", p, values.abs())
            lse[q0 + i0:q0 + i1] = torch.where(
                total[..., 0] > 0, (row_max[..., 0] + torch.log(total[..., 0])),
                torch.full_like(total[..., 0], float("-inf")))
    return out, scale, lse
