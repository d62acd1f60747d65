"""Single-process checks of the sampling kernels against brute force on tiny graphs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnpar.errors import ConfigError
from gnnpar.sampler import check_fanouts, mix, mix_int, relabel, sample_neighbors


def _csc(degrees: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """CSC whose in-edge ``j`` of node ``v`` has source ``1000 * v + j`` (all distinct)."""
    indptr = torch.zeros(len(degrees) + 1, dtype=torch.int64)
    indptr[1:] = torch.tensor(degrees).cumsum(0)
    indices = torch.cat([1000 * v + torch.arange(d) for v, d in enumerate(degrees)])
    return indptr, indices


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("hub_factor", [1, 4, 100])
@pytest.mark.parametrize("replace", [False, True])
def test_sample_neighbors_brute_force(replace: bool, hub_factor: int, device: str) -> None:
    # Degrees 0 .. 3 (all taken), 6 .. 12 (sort path) and 200 (Floyd path with factor 4).
    degrees = [0, 1, 3, 6, 7, 12, 200, 2, 200, 0]
    indptr, indices = (t.to(device) for t in _csc(degrees))
    nodes = torch.tensor([6, 0, 5, 5, 1, 2, 3, 4, 8, 9, 7, 6], device=device)
    k = 3
    count, nbr = sample_neighbors(indptr, indices, nodes,
                                  mix(torch.arange(12, device=device) + 5), k, replace,
                                  hub_factor)
    count, nbr, nodes = count.cpu(), nbr.cpu(), nodes.cpu()
    assert count.tolist() == [
        (k if degrees[v] else 0) if replace else min(k, degrees[v]) for v in nodes.tolist()]
    ptr = np.concatenate([[0], np.cumsum(count.numpy())])
    for i, v in enumerate(nodes.tolist()):
        got = nbr[ptr[i]:ptr[i + 1]].numpy()
        assert ((got // 1000 == v) & (got % 1000 < degrees[v])).all(), (v, got)
        if not replace:
            assert len(np.unique(got)) == len(got)
            if degrees[v] <= k:
                assert sorted(got % 1000) == list(range(degrees[v]))


@pytest.mark.parametrize("hub_factor", [1, 100])
def test_sample_neighbors_uniform(hub_factor: int) -> None:
    # 20000 draws of 4 of 40 in-edges: each edge is expected 2000 times (sd ~42).
    indptr, indices = _csc([40])
    nodes = torch.zeros(20_000, dtype=torch.int64)
    _, nbr = sample_neighbors(indptr, indices, nodes, mix(torch.arange(20_000)), 4,
                              hub_factor=hub_factor)
    freq = torch.bincount(nbr, minlength=40)
    assert int(freq.sum()) == 80_000
    assert int(freq.min()) > 1800 and int(freq.max()) < 2200
    # Keys are the only source of randomness: equal keys, equal samples.
    again = sample_neighbors(indptr, indices, nodes, mix(torch.arange(20_000)), 4,
                             hub_factor=hub_factor)[1]
    assert torch.equal(nbr, again)


def test_relabel_first_appearance_order() -> None:
    rng = np.random.default_rng(0)
    n_id = torch.from_numpy(rng.choice(1000, 50, replace=False))
    src = torch.from_numpy(rng.integers(0, 1000, 400))
    new, local = relabel(n_id, src)
    expect, index = [], {int(g): i for i, g in enumerate(n_id.tolist())}
    for g in src.tolist():
        if g not in index:
            index[g] = len(index)
            expect.append(g)
    assert new.tolist() == expect
    assert local.tolist() == [index[g] for g in src.tolist()]


def test_mix_matches_scalar_hash_and_spreads_bits() -> None:
    assert mix_int(1, 2) == mix_int(1, 2) != mix_int(2, 1)
    h = mix(torch.arange(1 << 16))
    assert torch.unique(h).numel() == 1 << 16
    bits = torch.stack([(h >> b) & 1 for b in range(64)]).float().mean(1)
    assert float(bits.min()) > 0.48 and float(bits.max()) < 0.52


@pytest.mark.parametrize("bad", [[], [10, 0], [-1], [2.5], "15,10", [True]])
def test_check_fanouts_rejects(bad: object) -> None:
    with pytest.raises(ConfigError, match="fanouts"):
        check_fanouts(bad)  # type: ignore[arg-type]
