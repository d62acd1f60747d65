"""Files in OGB's own on-disk layout, written by the tests (OGB data cannot be downloaded)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np


def csv_gz(path: Path, rows: np.ndarray | list[int]) -> None:
    """Write ``rows`` (one value or one row per line) as OGB's gzipped CSV."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.asarray(rows)
    arr = arr.reshape(len(arr), -1)
    with gzip.open(path, "wt") as f:
        for row in arr:
            f.write(",".join(str(v) for v in row) + "\n")
