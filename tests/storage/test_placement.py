"""Single-process checks of the row placements and the remote-row cache of the feature store.

The accelerator placements run under the device shadow, which holds each ``take`` to the
host reads its docstring states: none, except one for pinned rows the device cannot map.
"""

from __future__ import annotations

import pytest
import torch

from gnnpar.device import pin
from gnnpar.shadow import DeviceShadow
from gnnpar.storage.cache import RowCache
from gnnpar.storage.placement import (
    DeviceRows,
    HostRows,
    LocalRows,
    PinnedHostRows,
    PinnedRows,
    place_rows,
)


def _arrays() -> dict[str, torch.Tensor]:
    return {"x": torch.arange(24, dtype=torch.float32).view(8, 3),
            "y": torch.arange(8) % 3}


def _check_take(rows: LocalRows, device: torch.device) -> None:
    want = _arrays()
    index = torch.tensor([5, 0, 5, 7], device=device)
    for name in rows.names:
        got = rows.take(name, index)
        assert got.device == device
        assert torch.equal(got.cpu(), want[name][[5, 0, 5, 7]])
        out = torch.empty((4, *want[name].shape[1:]), dtype=want[name].dtype, device=device)
        assert rows.take(name, index, out=out) is out
        assert torch.equal(out.cpu(), want[name][[5, 0, 5, 7]])


def test_host_rows_on_a_cpu_rank_are_the_arrays_given() -> None:
    arrays = _arrays()
    rows = place_rows(arrays, torch.device("cpu"), budget_bytes=0)
    assert isinstance(rows, HostRows) and rows.placement == "host"
    assert rows.names == ("x", "y") and rows.arrays["x"] is arrays["x"]  # no copy
    _check_take(rows, torch.device("cpu"))


def _unmapped(arrays: dict[str, torch.Tensor], device: torch.device) -> LocalRows:
    """Pinned rows as on a runtime that refuses to map pinned memory."""
    return PinnedHostRows({k: pin(v) for k, v in arrays.items()}, device)


@pytest.mark.parametrize(("budget", "cls", "reads"), [
    (None, DeviceRows, 0), (10**6, DeviceRows, 0), (0, PinnedRows, 0),
    ("unmapped", PinnedHostRows, 1)])
def test_accelerator_placements_and_their_host_reads(budget: int | str | None,
                                                     cls: type[LocalRows], reads: int) -> None:
    """place_rows by budget (device while it fits, else pinned and mapped), and what a take
    waits for: nothing, or one host read of the indices where pinned rows are unmapped."""
    with DeviceShadow() as shadow:
        rows = (_unmapped(_arrays(), shadow.device) if isinstance(budget, str)
                else place_rows(_arrays(), shadow.device, budget))
        assert type(rows) is cls and rows.placement == cls.placement
        index = torch.tensor([1, 2], device=shadow.device)
        with shadow.window() as w:
            rows.take("x", index)
        assert w.num_syncs == reads, w.sites
        _check_take(rows, shadow.device)


def test_row_cache_lookup_and_take() -> None:
    cache = RowCache(torch.tensor([2, 5, 9]))
    assert not cache.filled
    hit, slot = cache.lookup(torch.tensor([5, 3, 9, 10, 2]))
    assert hit.tolist() == [True, False, True, False, True]
    assert slot[hit].tolist() == [1, 2, 0]
    cache.fill({"x": torch.tensor([[20.0], [50.0], [90.0]])})
    assert cache.filled and cache.take("x", slot[hit]).view(-1).tolist() == [50.0, 90.0, 20.0]
    empty = RowCache(torch.zeros(0, dtype=torch.int64), {"x": torch.zeros(0, 1)})
    assert empty.filled and not empty.lookup(torch.tensor([1, 2]))[0].any()
