"""Partition quality: edge cut, per-part load, halo replication and imbalance.

The figures are stored in ``meta.json`` under ``quality`` and printed as a table by
``gnnpar-partition`` (and ``gnnpar-partition info``):

- ``edge_cut``: directed edges of the source graph whose endpoints lie in different
  parts (each such edge makes its source a halo node of the destination's part), and
  ``edge_cut_share``, their share of all edges;
- ``per_part``: owned nodes, training nodes, in-edges of owned nodes and halo nodes of
  every part;
- ``replication_factor``: ``sum(owned + halo) / sum(owned)``, the average over nodes of
  the copies each part holds (the per-part ``(owned + halo) / owned`` weighted by owned
  nodes); 1.0 means no halo;
- ``imbalance``: ``max / mean`` over parts of each balanced quantity (``nodes``,
  ``train``, ``edges``) and of the halo; 1.0 is perfect balance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PER_PART = ("owned", "train", "edges", "halo")
_IMBALANCE = {"nodes": "owned", "train": "train", "edges": "edges", "halo": "halo"}


@dataclass(frozen=True)
class PartStats:
    """Load of one part.

    Attributes:
        owned: Nodes owned.
        train: Training nodes owned.
        edges: In-edges of owned nodes.
        halo: Halo nodes.
        cut: In-edges of owned nodes whose source another part owns.
    """

    owned: int
    train: int
    edges: int
    halo: int
    cut: int


def quality_report(stats: Sequence[PartStats], num_edges: int) -> dict[str, Any]:
    """The quality figures of a partition (the ``quality`` entry of ``meta.json``).

    Args:
        stats: One entry per part.
        num_edges: Edges of the whole graph.

    Returns:
        A JSON-ready dict; see the module docstring.
    """
    per_part = {name: [int(getattr(s, name)) for s in stats] for name in PER_PART}
    cut = sum(s.cut for s in stats)
    owned = sum(per_part["owned"])
    return {
        "edge_cut": cut,
        "edge_cut_share": round(cut / num_edges, 6) if num_edges else 0.0,
        "replication_factor": round((owned + sum(per_part["halo"])) / owned, 6),
        "imbalance": {q: _imbalance(per_part[col]) for q, col in _IMBALANCE.items()},
        "per_part": per_part,
    }


def _imbalance(values: Sequence[int]) -> float:
    mean = sum(values) / len(values)
    return round(max(values) / mean, 6) if mean else 1.0


def format_quality(quality: dict[str, Any], num_edges: int) -> str:
    """The quality report as a text table (one row per part, then ``max/mean``).

    Args:
        quality: As returned by :func:`quality_report`.
        num_edges: Edges of the whole graph.
    """
    per_part = quality["per_part"]
    k = len(per_part["owned"])
    width = max(10, *(len(f"{v:,}") + 2 for col in PER_PART for v in per_part[col]))
    lines = ["part".rjust(8) + "".join(col.rjust(width) for col in PER_PART)]
    for p in range(k):
        lines.append(str(p).rjust(8) + "".join(f"{per_part[col][p]:,}".rjust(width)
                                               for col in PER_PART))
    imb = quality["imbalance"]
    lines.append("max/mean".rjust(8) + "".join(
        f"{imb['nodes' if col == 'owned' else col]:.3f}".rjust(width) for col in PER_PART))
    lines.append(f"edge cut: {quality['edge_cut']:,} of {num_edges:,} edges "
                 f"({100 * quality['edge_cut_share']:.2f}%); replication factor "
                 f"{quality['replication_factor']:.3f}")
    return "\n".join(lines)
