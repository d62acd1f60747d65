"""Sizes of random splits: fractions checked, then floored without float surprises.

Shared by the node split (:meth:`~gnnpar.datasets.graph.GraphDataset.random_split`), the
link split (:func:`~gnnpar.datasets.link_split.random_link_split`) and ``--split``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from gnnpar.errors import DatasetError

# Fractions may sum to 1 + SPLIT_TOLERANCE (float error in "0.7,0.2,0.1"); a product
# f * n within SPLIT_TOLERANCE (relative) of an integer counts as that integer.
SPLIT_TOLERANCE = 1e-9
NODE_SPLIT = (0.6, 0.2, 0.2)
"""Train/val/test fractions of the labelled nodes of a graph that has no split of its own
(``--split``'s default there)."""
LINK_SPLIT = (0.85, 0.05, 0.1)
"""Train/val/test fractions of the edges of a link task on a graph without supervision
edges (``--split``'s default there, and ``synthetic:sbm?task=link``'s split)."""
SPLIT_FIX = ("give three fractions (train, val, test), each in [0, 1] and summing to at most "
             "1, e.g. 0.6,0.2,0.2.")


def check_split_fractions(
    fractions: Sequence[float], where: str | os.PathLike[str] | None = None,
    fix: str = SPLIT_FIX,
) -> tuple[float, float, float]:
    """Check ``(train, val, test)`` fractions: three numbers in ``[0, 1]`` summing to <= 1.

    Args:
        fractions: The three fractions.
        where: File, argument or dataset named in errors.
        fix: The fix named in errors.

    Returns:
        The fractions as a tuple of floats.

    Raises:
        DatasetError: Not three numbers, one outside ``[0, 1]`` (or NaN), or a sum above
            ``1 + SPLIT_TOLERANCE``; the error names field ``split``.
    """
    try:
        values = tuple(float(f) for f in fractions)
    except (TypeError, ValueError):
        raise DatasetError(f"{fractions!r} is not three numbers.", path=where, field="split",
                           fix=fix) from None
    if len(values) != 3:
        raise DatasetError(f"{values!r} has {len(values)} fractions, expected 3.", path=where,
                           field="split", fix=fix)
    for part, f in zip(("train", "val", "test"), values, strict=True):
        if not 0.0 <= f <= 1.0:  # also rejects NaN
            raise DatasetError(f"the {part} fraction {f} is outside [0, 1].", path=where,
                               field="split", fix=fix)
    if sum(values) > 1.0 + SPLIT_TOLERANCE:
        raise DatasetError(f"the fractions {values} sum to {sum(values):.6g} > 1.", path=where,
                           field="split", fix=fix)
    return values[0], values[1], values[2]


def _floor_count(fraction: float, n: int) -> int:
    """``floor(fraction * n)``, reading a product within tolerance of an integer as it."""
    v = fraction * n
    r = round(v)
    return int(r) if abs(v - r) <= SPLIT_TOLERANCE * max(1.0, v) else math.floor(v)


def split_sizes(fractions: Sequence[float], n: int) -> tuple[int, int, int]:
    """Sizes ``(n_train, n_val, n_test)`` of a random split of ``n`` labelled nodes.

    ``n_train = floor(f_train * n)`` and ``n_val = floor(f_val * n)``; ``n_test = n -
    n_train - n_val`` when the fractions sum to 1 (within ``SPLIT_TOLERANCE``), else
    ``floor(f_test * n)``. A product within ``SPLIT_TOLERANCE`` (relative) of an integer
    counts as that integer, so ``0.29 * 100`` gives 29, not the 28 of float rounding.

    Args:
        fractions: ``(train, val, test)`` fractions, checked by :func:`check_split_fractions`.
        n: Number of labelled nodes.

    Returns:
        The three sizes; they sum to at most ``n``.
    """
    f_train, f_val, f_test = check_split_fractions(fractions)
    n_train = min(_floor_count(f_train, n), n)
    n_val = min(_floor_count(f_val, n), n - n_train)
    if abs(f_train + f_val + f_test - 1.0) <= SPLIT_TOLERANCE:
        return n_train, n_val, n - n_train - n_val
    return n_train, n_val, min(_floor_count(f_test, n), n - n_train - n_val)
