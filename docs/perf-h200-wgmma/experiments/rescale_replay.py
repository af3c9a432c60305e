"""CPU replay of the rows kernel's running maximum (Session 30): for a 64-row split of the
bench's inputs (randn Q and K, sm_scale 192^-1/2, log2 units), the share of tiles after the
first in which a warp (16 rows) rescales O, with the eager maximum and with raised_max()'s
margin of 8 (kernels/csrc/wgmma/running_max.cuh).

    python docs/perf-h200-wgmma/experiments/rescale_replay.py
"""

import math

import torch

HEAD_DIM, ROWS, TILE, WARP_ROWS, MARGIN = 576, 64, 64, 16, 8.0


def rescaling_share(tiles: int, margin: float, seed: int = 0) -> float:
    """Mean share of a split's warps that rescale per tile after the first."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(ROWS, HEAD_DIM, generator=gen)
    k = torch.randn(tiles * TILE, HEAD_DIM, generator=gen)
    scores = (q @ k.T) * (192 ** -0.5 * math.log2(math.e))
    m_run = torch.full((ROWS,), -math.inf)
    shares = []
    for t in range(tiles):
        tile_max = scores[:, TILE * t:TILE * (t + 1)].max(dim=1).values
        moved = tile_max > m_run + margin
        if t > 0:
            shares.append(moved.view(-1, WARP_ROWS).any(dim=1).float().mean().item())
        m_run = torch.where(moved, tile_max, m_run)
    return sum(shares) / len(shares)


if __name__ == "__main__":
    for tiles in (2, 8, 16):
        print(f"{tiles:3d} tiles per split: warps rescaling per tile, eager {rescaling_share(tiles, 0.0):.2f}, "
              f"margin {MARGIN:g}: {rescaling_share(tiles, MARGIN):.2f}")
