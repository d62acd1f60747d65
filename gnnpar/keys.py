"""Counter-based randomness: 64-bit keys hashed from the values that name a draw.

The sampler's, the negative sampler's and the embeddings' random numbers are hashes of
integers that name them (seed, batch key, hop, rank, node id, draw), never the state of a
generator: the same on every device and rank, nothing to checkpoint.  The constants and
the mixing steps are SplitMix64's (Steele, Lea and Flood, 2014; Vigna's splitmix64.c).
"""

from __future__ import annotations

from torch import Tensor

MASK62 = (1 << 62) - 1
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
C1 = 0xBF58476D1CE4E5B9
C2 = 0x94D049BB133111EB


def signed(v: int) -> int:
    """Reinterpret a 64-bit unsigned integer as the int64 torch stores."""
    v &= M64
    return v - (1 << 64) if v >= 1 << 63 else v


def mix_int(*values: int) -> int:
    """SplitMix64 hash of a sequence of Python integers (for batch and hop keys)."""
    z = 0
    for v in values:
        z = (z ^ (v & M64)) + GOLDEN & M64
        z = (z ^ (z >> 30)) * C1 & M64
        z = (z ^ (z >> 27)) * C2 & M64
        z ^= z >> 31
    return signed(z)


def mix(z: Tensor) -> Tensor:
    """A 64-bit mixer on an int64 tensor: ``z *= C1; z ^= z >> 30; z *= C2; z ^= z >> 31``.

    SplitMix64's constants and shifts, one xorshift fewer than its finaliser (which starts
    with ``z ^= z >> 30`` and shifts by 27 in the middle): each step is invertible, so
    distinct inputs give distinct outputs.  Wrapping arithmetic, logical shifts.

    Args:
        z: int64 tensor of any shape.

    Returns:
        int64 tensor of the same shape with well-mixed bits.
    """
    z = z * signed(C1)
    z = z ^ ((z >> 30) & ((1 << 34) - 1))
    z = z * signed(C2)
    return z ^ ((z >> 31) & ((1 << 33) - 1))


def mix_with(z: int, values: Tensor) -> Tensor:
    """``mix_int(*prefix, v)`` for every ``v`` of ``values``, given ``z = mix_int(*prefix)``.

    Computed on ``values``' device (no host-to-device copy).
    """
    z_t = (values ^ z) + signed(GOLDEN)
    z_t = (z_t ^ ((z_t >> 30) & ((1 << 34) - 1))) * signed(C1)
    z_t = (z_t ^ ((z_t >> 27) & ((1 << 37) - 1))) * signed(C2)
    return z_t ^ ((z_t >> 31) & ((1 << 33) - 1))
