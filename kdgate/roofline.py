"""Roofline arithmetic of MLA tree verify: bytes and FLOPs per call, the floor, fractions.

One cached token is 576 bf16 = 1152 B, read once per request; one query row (draft token
x head) costs 2 * (576 + 512) = 2176 FLOP per visible position. As issue #7 counts them:
bytes = sum over requests of (ctx + N) * 1152, FLOPs = sum of N * H * (ctx + N) * 2176.
The floor is max(bytes / copy bandwidth, FLOPs / matmul rate), both measured on the same
device in the same run (the best of several samples spread over it, ``best_of``); a
kernel's fraction of the roofline is floor / measured time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

BYTES_PER_TOKEN = 576 * 2
FLOP_PER_ROW_TOKEN = 2 * (576 + 512)


@dataclass(frozen=True)
class Ceilings:
    """Measured device ceilings: copy bandwidth (GB/s, bytes read + written per second)
    and dense bf16 matmul rate (TFLOP/s)."""

    copy_gbps: float
    matmul_tflops: float

    def __post_init__(self):
        for name in ("copy_gbps", "matmul_tflops"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")

    def as_dict(self) -> dict:
        return asdict(self)


def best_of(samples) -> Ceilings:
    """The best rate each ceiling reached over ``samples`` (Ceilings measured at several
    points of one run): a ceiling is the most the part delivers, and a sample lands low
    when the part is throttled or busy, never high. ValueError when there is none."""
    samples = list(samples)
    if not samples:
        raise ValueError("samples must hold at least one Ceilings, got none")
    return Ceilings(copy_gbps=max(c.copy_gbps for c in samples),
                    matmul_tflops=max(c.matmul_tflops for c in samples))


def call_bytes(ctx: list[int] | tuple[int, ...], n: int) -> int:
    """KV bytes one call must read: each request's prefix plus its N draft tokens."""
    return sum((c + n) * BYTES_PER_TOKEN for c in ctx)


def call_flops(ctx: list[int] | tuple[int, ...], n: int, heads: int) -> int:
    """Useful FLOPs of one call (every row against its whole prefix and drafts)."""
    return sum(n * heads * (c + n) * FLOP_PER_ROW_TOKEN for c in ctx)


def floor_us(ctx, n: int, heads: int, ceilings: Ceilings) -> float:
    """The roofline floor of one call in microseconds."""
    t_mem = call_bytes(ctx, n) / (ceilings.copy_gbps * 1e9)
    t_flop = call_flops(ctx, n, heads) / (ceilings.matmul_tflops * 1e12)
    return max(t_mem, t_flop) * 1e6


def bound_by(ctx, n: int, heads: int, ceilings: Ceilings) -> str:
    """'memory' or 'compute': which ceiling sets the floor."""
    t_mem = call_bytes(ctx, n) / (ceilings.copy_gbps * 1e9)
    t_flop = call_flops(ctx, n, heads) / (ceilings.matmul_tflops * 1e12)
    return "memory" if t_mem >= t_flop else "compute"


def figures(ctx, n: int, heads: int, time_us: float, ceilings: Ceilings) -> dict:
    """Achieved GB/s, TFLOP/s, their fractions of the ceilings, and the roofline fraction."""
    if not time_us > 0:
        raise ValueError(f"time_us must be positive, got {time_us!r}")
    seconds = time_us * 1e-6
    gbps = call_bytes(ctx, n) / seconds / 1e9
    tflops = call_flops(ctx, n, heads) / seconds / 1e12
    floor = floor_us(ctx, n, heads, ceilings)
    return {
        "gbps": gbps,
        "tflops": tflops,
        "bandwidth_fraction": gbps / ceilings.copy_gbps,
        "matmul_fraction": tflops / ceilings.matmul_tflops,
        "floor_us": floor,
        "roofline_fraction": floor / time_us,
        "bound": bound_by(ctx, n, heads, ceilings),
    }
