"""How both planners cost their candidates and choose one.

``gnnpar-train --plan`` (:mod:`gnnpar.train.plan`: the sampled, full-graph 1D and 3D
strategies of a GNN on a partitioned graph) and :func:`gnnpar.parallel.planner.plan` (the
``dp x tp x pp`` layouts of a DNN) enumerate different candidates and cost them the same
way: multiply-adds and bytes sent through one :class:`HardwareModel` (no overlap: a
ranking, not a forecast).  Of the candidates within the memory budget, :func:`choose`
takes the one that moves the fewest bytes unless another is estimated faster by more
than a margin (the GNN planner's is 20%; the DNN planner's is 0: the fastest).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

C = TypeVar("C")


@dataclass(frozen=True)
class HardwareModel:
    """Throughput of one rank, to turn FLOPs and bytes into seconds.

    Attributes:
        flops_per_s: Sustained matmul FLOP/s of one rank.
        bytes_per_s: Bytes per second one rank sends to its peers.
    """

    flops_per_s: float = 2e10
    bytes_per_s: float = 1e9

    def seconds(self, flops: float, nbytes: float = 0.0, speed: float = 1.0) -> float:
        """``flops`` on a rank of relative ``speed``, then ``nbytes`` sent (no overlap)."""
        return flops / (self.flops_per_s * speed) + nbytes / self.bytes_per_s


DEFAULT_HARDWARE = HardwareModel()
"""The throughputs the planners assume unless given others."""


def choose(pool: Sequence[C], seconds: Callable[[C], float], nbytes: Callable[[C], float],
           margin: float, name: Callable[[C], str] = str) -> tuple[C, str]:
    """The candidate to run of a non-empty ``pool`` of those that fit, and why.

    The one that sends the fewest bytes (ties: the faster), unless the fastest is
    estimated faster by more than ``margin`` (a share of the frugal one's time): a small
    estimated gain does not pay for many more bytes, whose cost grows on slower networks.
    """
    frugal = min(pool, key=lambda c: (nbytes(c), seconds(c)))
    fastest = min(pool, key=seconds)
    gain = 1 - seconds(fastest) / seconds(frugal) if seconds(frugal) else 0.0
    ratio = nbytes(fastest) / max(nbytes(frugal), 1)
    if fastest is not frugal and gain > margin:
        return fastest, (f"estimated {gain:.0%} faster than {name(frugal)}, the fewest bytes "
                         f"({ratio:.2f}x its bytes; margin {margin:.0%})")
    return frugal, "the fewest bytes" + (
        f"; {name(fastest)} is estimated {gain:.0%} faster at {ratio:.2f}x the bytes, within "
        f"the {margin:.0%} margin" if fastest is not frugal else "")
