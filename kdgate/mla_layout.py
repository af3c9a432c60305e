"""Re-expressing a GQA layer's q/k/v exactly in absorbed-MLA layout.

SmolLM2 has 3 KV heads of 64 dims and 9 query heads (3 per KV head). Per token build
c = [k0 k1 k2 v0 v1 v2 0 ... 0] (576 dims) and rotate it by a fixed orthogonal R
(576 x 576, from a seeded Gaussian by QR with the sign of R's diagonal fixed), so every
dimension is dense: latent = c.R. Query head h of group g = h // 3 becomes
q_mla = (q_h placed in k_g's slot of c).R. Then q_mla.latent = q_h.k_g exactly (R is
orthogonal), so the scores are the model's own, and the MLA value (the latent's first
512 dims) is an exact linear image of the real k/v. Everything is fp64 until the one
final rounding to bf16.
"""

from __future__ import annotations

import torch

LATENT_DIM = 576
VALUE_DIM = 512


def rotation(seed: int, dim: int = LATENT_DIM) -> torch.Tensor:
    """A fixed orthogonal matrix [dim, dim] in fp64, reproducible from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    gauss = torch.randn(dim, dim, generator=gen, dtype=torch.float64)
    q, r = torch.linalg.qr(gauss)
    return q * torch.sign(torch.diagonal(r))[None, :]


def to_mla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rot: torch.Tensor):
    """q [T, H, d], k and v [T, KV, d] (any float) -> (q_mla [T, H, 576], latent [T, 576]),
    fp64. Needs 2*KV*d <= 576 and H a multiple of KV."""
    T, H, d = q.shape
    kv = k.shape[1]
    if 2 * kv * d > LATENT_DIM or H % kv:
        raise ValueError(f"cannot place {kv} KV heads of {d} dims (and {H} query heads) in {LATENT_DIM}")
    c = torch.zeros(k.shape[0], LATENT_DIM, dtype=torch.float64)
    for g in range(kv):
        c[:, g * d:(g + 1) * d] = k[:, g].double()
        c[:, (kv + g) * d:(kv + g + 1) * d] = v[:, g].double()
    qc = torch.zeros(T, H, LATENT_DIM, dtype=torch.float64)
    group = H // kv
    for h in range(H):
        g = h // group
        qc[:, h, g * d:(g + 1) * d] = q[:, h].double()
    return qc @ rot, c @ rot
