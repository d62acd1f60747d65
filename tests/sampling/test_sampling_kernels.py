"""Single-process checks of the sampling kernels against brute force on tiny graphs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pytest
import torch

from gnnpar.errors import ConfigError
from gnnpar.jit import AVAILABLE
from gnnpar.keys import mix, mix_int, mix_with
from gnnpar.sampling import compiled
from gnnpar.sampling.fanouts import Fanouts
from gnnpar.sampling.kernels import (
    part_source_ids,
    relabel,
    sample_in_ranges,
    sample_neighbors,
)

T = TypeVar("T")
needs_numba = pytest.mark.skipif(not AVAILABLE, reason="numba not installed")


def _both(monkeypatch: pytest.MonkeyPatch, fn: Callable[[], T]) -> tuple[T, T]:
    """``fn()`` with the compiled kernels, then with the torch ones."""
    monkeypatch.setenv("GNNPAR_KERNELS", "compiled")
    compiled = fn()
    monkeypatch.setenv("GNNPAR_KERNELS", "torch")
    return compiled, fn()


def _csc(degrees: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """CSC whose in-edge ``j`` of node ``v`` has source ``1000 * v + j`` (all distinct)."""
    indptr = torch.zeros(len(degrees) + 1, dtype=torch.int64)
    indptr[1:] = torch.tensor(degrees).cumsum(0)
    indices = torch.cat([1000 * v + torch.arange(d) for v, d in enumerate(degrees)])
    return indptr, indices


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("replace", [False, True])
def test_sample_neighbors_brute_force(replace: bool, device: str, kernel: str) -> None:
    # Degrees 0 .. 3 (all taken when k = 3), 6 .. 12 and 200 (Floyd's algorithm).
    degrees = [0, 1, 3, 6, 7, 12, 200, 2, 200, 0]
    indptr, indices = (t.to(device) for t in _csc(degrees))
    nodes = torch.tensor([6, 0, 5, 5, 1, 2, 3, 4, 8, 9, 7, 6], device=device)
    k = 3
    table = sample_neighbors(indptr, indices, nodes, mix(torch.arange(12, device=device) + 5),
                             k, replace).cpu()
    assert table.shape == (12, k)
    for i, v in enumerate(nodes.tolist()):
        row = table[i].numpy()
        got = row[row >= 0]
        want = (k if degrees[v] else 0) if replace else min(k, degrees[v])
        assert len(got) == want and (row[:want] >= 0).all(), (v, row)  # kept first, then -1
        assert ((got // 1000 == v) & (got % 1000 < degrees[v])).all(), (v, got)
        if not replace:
            assert len(np.unique(got)) == len(got)
            if degrees[v] <= k:
                assert sorted(got % 1000) == list(range(degrees[v]))


@pytest.mark.parametrize("degree", [8, 40])
def test_sample_neighbors_uniform(degree: int, kernel: str) -> None:
    # 20000 draws of 4 of d in-edges: each edge is expected 80000 / d times.
    indptr, indices = _csc([degree])
    nodes = torch.zeros(20_000, dtype=torch.int64)
    table = sample_neighbors(indptr, indices, nodes, mix(torch.arange(20_000)), 4)
    freq = torch.bincount(table.view(-1), minlength=degree).double()
    expect = 80_000 / degree
    assert int(freq.sum()) == 80_000
    # Pearson chi-square against uniform, d - 1 degrees of freedom (p > 0.001).
    chi2 = float(((freq - expect) ** 2 / expect).sum())
    assert chi2 < {8: 24.3, 40: 73.4}[degree], chi2
    # Every 4-subset of a node of degree 8 shows up (70 of them), near equally often.
    if degree == 8:
        subsets = torch.sort(table, dim=1).values
        codes = (subsets * torch.tensor([512, 64, 8, 1])).sum(1)
        counts = torch.unique(codes, return_counts=True)[1]
        assert counts.numel() == 70 and int(counts.min()) > 200
    # Keys are the only source of randomness: equal keys, equal samples.
    again = sample_neighbors(indptr, indices, nodes, mix(torch.arange(20_000)), 4)
    assert torch.equal(table, again)


def _relabel_brute_force(n_id: list[int], flat: list[int],
                         owned: list[bool] | None) -> tuple[list[int], list[int], int]:
    """New ids (own first, each group in first-appearance order), kept entries' local ids,
    number of own new ids (all of them when ``owned`` is ``None``)."""
    first: list[int] = []
    for g in flat:
        if g >= 0 and g not in n_id and g not in first:
            first.append(g)
    own = {g for g, o in zip(flat, owned, strict=True) if o} if owned is not None else set(first)
    want = [g for g in first if g in own] + [g for g in first if g not in own]
    index = {g: i for i, g in enumerate([*n_id, *want])}
    return want, [index[g] for g in flat if g >= 0], len(own & set(first))


@pytest.mark.parametrize("with_owned", [True, False])
@pytest.mark.parametrize("shape", [(100, 4), (0, 4), (30, 1)])
def test_relabel_first_appearance_order_own_nodes_first(with_owned: bool,
                                                        shape: tuple[int, int],
                                                        kernel: str) -> None:
    rng = np.random.default_rng(shape[0])
    n_id = rng.choice(1000, 50, replace=False)
    nbr = rng.integers(0, 1000, shape)
    nbr[rng.random(shape) < 0.2] = -1  # missing edges
    owned = (nbr >= 0) & (nbr < 300)  # "this rank" owns ids below 300
    new, src, pos, n_own, *_ = relabel(torch.from_numpy(nbr), torch.from_numpy(n_id),
                                   torch.from_numpy(owned) if with_owned else None,
                                   num_ids=1000 if with_owned else 1 << 40)
    flat = nbr.reshape(-1).tolist()
    want, local, want_own = _relabel_brute_force(
        n_id.tolist(), flat, owned.reshape(-1).tolist() if with_owned else None)
    assert new.tolist() == want and n_own == want_own
    assert pos.tolist() == [i for i, g in enumerate(flat) if g >= 0]
    assert src.tolist() == local


def test_relabel_of_an_empty_batch(kernel: str) -> None:
    empty = torch.zeros(0, dtype=torch.int64)
    new, src, pos, n_own, *_ = relabel(empty.view(0, 3), empty, None)
    assert new.numel() == src.numel() == pos.numel() == n_own == 0


@needs_numba
@pytest.mark.parametrize("replace", [False, True])
def test_compiled_positions_equal_the_torch_kernel(replace: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Degrees around the fan-out and far above it, keys spread over all 64 bits: the
    # compiled Floyd draws the same positions as the torch one, row for row.
    gen = torch.Generator().manual_seed(3)
    deg = torch.cat([torch.arange(12), torch.randint(0, 3000, (500,), generator=gen)])
    start = torch.randint(0, 1 << 40, (deg.numel(),), generator=gen)
    keys = mix(torch.randint(-(2**62), 2**62, (deg.numel(),), generator=gen))
    for k in (1, 5, 15):
        got, want = _both(monkeypatch,
                          lambda k=k: sample_in_ranges(start, deg, keys, k, replace))
        assert torch.equal(got, want), k


@needs_numba
def test_compiled_gather_reads_the_sources() -> None:
    indices = torch.tensor([3, 0, 2, 1], dtype=torch.int32)
    gids = torch.tensor([100, 101, 102, 103])
    pos = torch.tensor([[2, -1], [0, 3], [-1, -1]])
    got = compiled.gather_sources(pos, indices, gids)
    assert got.tolist() == [[102, -1], [103, 101], [-1, -1]]


def test_part_source_ids_map_owned_and_halo_local_ids(kernel: str) -> None:
    # A part owning global ids 50..52 (local 0..2) with halo nodes 7 and 90 (local 3, 4):
    # every sampled position's source, checked by hand.
    indices = torch.tensor([4, 0, 3, 2, 1])
    pos = torch.tensor([[0, 1, -1], [2, 3, 4], [-1, -1, -1]])
    got = part_source_ids(pos, indices, 50, 3, torch.tensor([7, 90]))
    assert got.tolist() == [[90, 50, -1], [7, 52, 51], [-1, -1, -1]]
    owned_only = part_source_ids(torch.tensor([[1, -1]]), torch.tensor([0, 2]), 50, 3,
                                 torch.zeros(0, dtype=torch.int64))
    assert owned_only.tolist() == [[52, -1]]


@needs_numba
def test_compiled_relabel_equals_the_torch_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    # Many repeats (ids below 300) and padding: the same numbering, own nodes first.
    gen = torch.Generator().manual_seed(4)
    node = torch.randperm(300, generator=gen)[:40]
    nbr = torch.randint(0, 300, (200, 7), generator=gen)
    nbr[torch.rand(200, 7, generator=gen) < 0.3] = -1
    owned = (nbr >= 0) & (nbr % 3 == 0)
    for own in (owned, None):
        got, want = _both(monkeypatch, lambda own=own: relabel(
            nbr, node, own, 300, groups=lambda g: g % 4, num_groups=4,
            extra=torch.tensor([5, 6])))
        assert torch.equal(got.new, want.new) and torch.equal(got.src, want.src)
        assert torch.equal(got.pos, want.pos) and got.num_owned == want.num_owned
        assert got.extra == want.extra == [5, 6]
        assert got.group_new == want.group_new and got.group_owned == want.group_owned
        assert sum(got.group_new) == got.new.numel()


def test_mix_with_equals_the_scalar_hash() -> None:
    for prefix in ((1, 2, 0), (7, 2**62 + 5, 3)):
        got = mix_with(mix_int(*prefix), torch.arange(5)).tolist()
        assert got == [mix_int(*prefix, r) for r in range(5)]


def test_mix_int_is_splitmix64_and_mix_is_its_documented_mixer() -> None:
    m64 = (1 << 64) - 1
    # SplitMix64's published first outputs (Vigna's splitmix64.c) for seeds 0 and 1234567:
    # mix_int(v) is one step from state v.
    assert mix_int(0) & m64 == 0xE220A8397B1DCDAF
    assert mix_int(1234567) & m64 == 6457827717110365317
    assert mix_int(1, 2) != mix_int(2, 1)  # order matters

    def reference(v: int) -> int:  # mix's docstring, on Python integers mod 2^64
        z = v * 0xBF58476D1CE4E5B9 & m64
        z ^= z >> 30
        z = z * 0x94D049BB133111EB & m64
        return z ^ (z >> 31)

    values = [0, 1, -1, 2**63 - 1, -(2**63), 12345, -987654321, 2**40 + 7]
    got = mix(torch.tensor(values, dtype=torch.int64)).tolist()
    assert [g & m64 for g in got] == [reference(v & m64) for v in values]
    h = mix(torch.arange(1 << 16))
    assert torch.unique(h).numel() == 1 << 16  # a bijection: no two inputs collide
    bits = torch.stack([(h >> b) & 1 for b in range(64)]).float().mean(1)
    assert float(bits.min()) > 0.48 and float(bits.max()) < 0.52


@pytest.mark.parametrize("bad", [[], [10, 0], [-1], [2.5], "15,10", [True]])
def test_fanouts_parse_rejects(bad: object) -> None:
    with pytest.raises(ConfigError, match="fanouts"):
        Fanouts.parse(bad)  # type: ignore[arg-type]


def test_fanouts_capped_is_a_new_value() -> None:
    """Capping narrows every fan-out above the largest in-degree and changes nothing else."""
    fanouts = Fanouts.parse([15, 10, 3])
    assert fanouts.hops == (15, 10, 3) and fanouts.num_hops == 3
    assert fanouts.capped(12) == Fanouts(((12, 10, 3),))
    assert fanouts.capped(0) == Fanouts(((1, 1, 1),))  # a graph without edges keeps 1
    assert fanouts.hops == (15, 10, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fanouts.per_relation = ((1,),)  # type: ignore[misc]
