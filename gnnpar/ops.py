"""Tensor helpers of the hot path.

``torch.bincount`` reads its input's maximum on the host to size its output, which on a
GPU waits for every kernel queued before it; :func:`count` adds ones into a tensor of a
size the caller knows instead.  :func:`from_mmap` wraps a read-only memory map without
copying it.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import Tensor


def from_mmap(a: np.ndarray) -> Tensor:
    """A tensor over a read-only memory map, without copying (never write to it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(a)


def count(values: Tensor, size: int, dtype: torch.dtype = torch.int64) -> Tensor:
    """``[size]`` occurrences of each of ``0 .. size - 1`` in ``values`` (all in range)."""
    out = torch.zeros(size, dtype=dtype, device=values.device)
    return out.index_add_(0, values, torch.ones_like(values, dtype=dtype))
