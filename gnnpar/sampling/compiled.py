"""The sampler's CPU kernels, compiled with numba: the same results as the torch ones.

:func:`gnnpar.sampling.kernels.sample_in_ranges` and
:func:`gnnpar.sampling.kernels.relabel` are fixed sequences of whole-tensor torch
operations so that they run on a GPU without a host synchronisation; on a CPU those
dozens of passes over each hop (Floyd's ``k`` rounds, a sort of the batch's ids and the
sampled ones) cost more than the work.  The kernels here
compute the same values in one pass per row or entry, on one thread:

* :func:`sample_in_ranges` — Floyd's algorithm row by row, with the same counter-based
  draws (SplitMix64 of the key and the draw's position), so each row's positions are
  *equal* to the torch kernel's (the tests compare them);
* :func:`gather_sources` — the sampled positions' source ids in one pass;
* :func:`relabel` — batch-local numbering in first-appearance order, this rank's own
  nodes first, through an open-addressing hash table sized by the batch (never by the
  graph), instead of a sort: equal to the torch relabel's.

numba is optional (:mod:`gnnpar.jit`): the sampler falls back to the torch kernels
without it.  ``benchmarks/bench_sampling.py`` measures both against DGL's sampler.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from gnnpar.jit import njit
from gnnpar.keys import C1, C2, GOLDEN, MASK62

_GOLDEN, _C1, _C2, _MASK62 = (np.uint64(v) for v in (GOLDEN, C1, C2, MASK62))


@njit
def _draw(key: np.int64, j: int) -> np.uint64:  # pragma: no cover - compiled
    """``mix(key + (j + 1) * GOLDEN) & MASK62`` of :mod:`gnnpar.sampling.kernels`, on uint64."""
    z = np.uint64(key) + np.uint64(j + 1) * _GOLDEN
    z = z * _C1
    z = z ^ (z >> np.uint64(30))
    z = z * _C2
    z = z ^ (z >> np.uint64(31))
    out: np.uint64 = z & _MASK62
    return out


@njit
def _positions(start: np.ndarray, deg: np.ndarray, keys: np.ndarray, k: int,
               replace: bool, out: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(start.shape[0]):
        s, d = start[i], deg[i]
        if replace:
            for j in range(k):
                out[i, j] = s + np.int64(_draw(keys[i], j) % np.uint64(d)) if d > 0 else -1
            continue
        if d <= k:
            for j in range(k):
                out[i, j] = s + j if j < d else -1
            continue
        for j in range(k):  # Floyd: draw r in [0, d - k + j]; a repeat takes d - k + j
            top = d - k + j
            r = np.int64(_draw(keys[i], j) % np.uint64(top + 1))
            for q in range(j):
                if out[i, q] == s + r:
                    r = top
                    break
            out[i, j] = s + r


@njit
def _relabel(flat: np.ndarray, node: np.ndarray, owned: np.ndarray, has_owned: bool,
             table_bits: int, src: np.ndarray, pos: np.ndarray,
             new: np.ndarray) -> tuple[int, int, int]:  # pragma: no cover - compiled
    size = 1 << table_bits
    mask = np.int64(size - 1)
    shift = np.uint64(64 - table_bits)
    keys = np.full(size, -1, dtype=np.int64)
    vals = np.empty(size, dtype=np.int32)  # batch-local ids: a batch stays below 2^31
    b = node.shape[0]
    for i in range(b):
        h = np.int64((np.uint64(node[i]) * _GOLDEN) >> shift)
        while keys[h] >= 0 and keys[h] != node[i]:
            h = (h + np.int64(1)) & mask
        keys[h] = node[i]
        vals[h] = i
    # Pass 1: each kept entry's code (batch node: its id; new node: b + its index in
    # first-appearance order); the new ids and whether they are own.
    n_valid = n_new = n_own = 0
    is_own = np.zeros(flat.shape[0], dtype=np.bool_)
    for i in range(flat.shape[0]):
        v = flat[i]
        if v < 0:
            continue
        h = np.int64((np.uint64(v) * _GOLDEN) >> shift)
        while keys[h] >= 0 and keys[h] != v:
            h = (h + np.int64(1)) & mask
        if keys[h] < 0:
            keys[h] = v
            vals[h] = b + n_new
            new[n_new] = v
            own = owned[i] if has_owned else True
            is_own[n_new] = own
            n_own += own
            n_new += 1
        src[n_valid] = vals[h]
        pos[n_valid] = i
        n_valid += 1
    # Own new nodes first, each group in first-appearance order.
    final = np.empty(n_new, dtype=np.int64)
    order = np.empty(n_new, dtype=np.int64)
    at_own, at_other = 0, n_own
    for j in range(n_new):
        if is_own[j]:
            final[j], order[at_own] = b + at_own, j
            at_own += 1
        else:
            final[j], order[at_other] = b + at_other, j
            at_other += 1
    reordered = new[:n_new][order]
    new[:n_new] = reordered
    for i in range(n_valid):
        if src[i] >= b:
            src[i] = final[src[i] - b]
    return n_valid, n_new, n_own


@njit
def _gather(pos: np.ndarray, indices: np.ndarray, gids: np.ndarray,
            out: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(pos.shape[0]):
        out[i] = gids[indices[pos[i]]] if pos[i] >= 0 else -1


def gather_sources(pos: Tensor, indices: Tensor, gids: Tensor) -> Tensor:
    """``gids[indices[pos]]`` where ``pos >= 0``, else ``-1``, in one pass (CPU tensors).

    Args:
        pos: ``[n, k]`` positions in the CSC's edge arrays, ``-1``-padded.
        indices: ``[nnz]`` source (local id) of each edge.
        gids: Global id of each local id.

    Returns:
        ``[n, k]`` int64 global ids of the sources, ``-1`` where ``pos`` is.
    """
    out = torch.empty(pos.shape, dtype=torch.int64)
    _gather(pos.reshape(-1).contiguous().numpy(), indices.numpy(), gids.numpy(),
            out.view(-1).numpy())
    return out


@njit
def _gather_split(pos: np.ndarray, indices: np.ndarray, first: int, num_owned: int,
                  halo: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(pos.shape[0]):
        if pos[i] < 0:
            out[i] = -1
        else:
            src = indices[pos[i]]
            out[i] = src + first if src < num_owned else halo[src - num_owned]


def gather_sources_split(pos: Tensor, indices: Tensor, first: int, num_owned: int,
                         halo_gids: Tensor) -> Tensor:
    """:func:`gather_sources` with the global ids given as a part's owned range and halo ids."""
    out = torch.empty(pos.shape, dtype=torch.int64)
    _gather_split(pos.reshape(-1).contiguous().numpy(), indices.numpy(), first, num_owned,
                  halo_gids.numpy(), out.view(-1).numpy())
    return out


def sample_in_ranges(start: Tensor, deg: Tensor, keys: Tensor, fanout: int,
                     replace: bool = False) -> Tensor:
    """:func:`gnnpar.sampling.kernels.sample_in_ranges` on CPU tensors, compiled (equal output)."""
    out = torch.empty((start.numel(), fanout), dtype=torch.int64)
    _positions(start.numpy(), deg.numpy(), keys.numpy(), fanout, replace, out.numpy())
    return out


def relabel(nbr: Tensor, node: Tensor, owned: Tensor | None
            ) -> tuple[Tensor, Tensor, Tensor, int]:
    """:func:`gnnpar.sampling.kernels.relabel`'s numbering on CPU tensors, compiled (equal output).

    Returns:
        ``(new, src, pos, num_owned)`` as in :class:`gnnpar.sampling.kernels.Relabelled`.
    """
    flat = nbr.reshape(-1).contiguous()
    e, b = flat.numel(), node.numel()
    bits = max(4, int(2 * (b + e)).bit_length())  # load factor below a half
    src = torch.empty(e, dtype=torch.int64)
    pos = torch.empty(e, dtype=torch.int64)
    new = torch.empty(e, dtype=torch.int64)
    own = (owned.reshape(-1).contiguous() if owned is not None
           else torch.zeros(0, dtype=torch.bool))
    n_valid, n_new, n_own = _relabel(flat.numpy(), node.contiguous().numpy(), own.numpy(),
                                     owned is not None, bits, src.numpy(), pos.numpy(),
                                     new.numpy())
    return new[:n_new], src[:n_valid], pos[:n_valid], int(n_own)
