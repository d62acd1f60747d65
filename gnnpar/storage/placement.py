"""Where this part's per-row arrays live, and what reading rows of them costs.

:class:`LocalRows` is the contract (GraphBolt's ``Feature`` has the same shape): arrays
``[num_rows, ...]`` by name, and :meth:`~LocalRows.take`, their rows by index on the
compute device.  One class per placement implements it; they differ in where the bytes
sit and what a gather moves and waits for:

=======================  ================================  ==========================
class                    rows in                           :meth:`~LocalRows.take`
=======================  ================================  ==========================
:class:`DeviceRows`      device memory                     a device gather
:class:`PinnedRows`      pinned host memory, mapped (UVA)  a device gather over PCIe
:class:`PinnedHostRows`  pinned host memory, not mapped    a host gather, then a copy
:class:`HostRows`        host memory (a CPU rank)          a host gather
=======================  ================================  ==========================

:func:`place_rows` chooses one from the device and a memory budget.  The feature store
(:mod:`gnnpar.storage.features`), the embeddings and the sampler's edge features place
their rows with it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch
from torch import Tensor

from gnnpar.device import accelerated, device_view, free_bytes, load_rows, pin


class LocalRows(ABC):
    """Per-row arrays of this part, placed for the compute device, read by row index.

    Args:
        arrays: ``{name: [num_rows, ...]}`` the placed arrays.
        device: The compute device (where :meth:`take` returns rows).

    Attributes:
        placement: The placement's name: ``"device"``, ``"pinned"``, ``"pinned-host"`` or
            ``"host"``.
        arrays: The placed arrays by name: their row shapes and dtypes are the rows'.
            Writes to them show in later :meth:`take` calls.
        device: The compute device.
    """

    placement: ClassVar[str]

    def __init__(self, arrays: dict[str, Tensor], device: torch.device) -> None:
        self.arrays = arrays
        self.device = device

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the arrays, in the order given."""
        return tuple(self.arrays)

    @abstractmethod
    def take(self, name: str, index: Tensor, out: Tensor | None = None) -> Tensor:
        """Rows ``index`` of array ``name`` on :attr:`device` (written into ``out`` if given).

        The cost is the placement's (see the class).

        Args:
            name: One of :attr:`names`.
            index: ``[n]`` int64 row indices on :attr:`device`.
            out: ``[n, ...]`` tensor on :attr:`device` of the array's dtype.

        Returns:
            ``[n, ...]`` the rows (``out`` when given).
        """


class _ReadInPlace(LocalRows):
    """Rows that the compute device's kernels read where they are: one ``index_select``."""

    def take(self, name: str, index: Tensor, out: Tensor | None = None) -> Tensor:
        """Rows ``index`` of array ``name``: one gather kernel, no host synchronisation."""
        a = self.arrays[name]
        if out is not None:
            return torch.index_select(a, 0, index, out=out)
        return a.index_select(0, index)


class DeviceRows(_ReadInPlace):
    """Rows in device memory.

    :meth:`take` costs one gather kernel reading device memory; the host does not wait.

    Args:
        arrays: ``{name: [num_rows, ...]}`` host arrays (e.g. over memory maps), copied
            onto ``device`` in chunks (:func:`gnnpar.device.load_rows`).
        device: The accelerator.
    """

    placement = "device"

    def __init__(self, arrays: dict[str, Tensor], device: torch.device) -> None:
        super().__init__({k: load_rows(v, device) for k, v in arrays.items()}, device)


class PinnedRows(_ReadInPlace):
    """Rows in pinned host memory, read by the device in place (UVA).

    :meth:`take` costs one gather kernel on the device that pulls only the selected rows
    over PCIe/NVLink (:func:`gnnpar.device.device_view`); the host does not wait.

    Args:
        pinned: ``{name: [num_rows, ...]}`` contiguous pinned host arrays
            (:func:`gnnpar.device.pin`).
        device: The accelerator.

    Raises:
        RuntimeError, TypeError, ValueError: When the runtime refuses to map them, or a
            mapped row reads back other values (then use :class:`PinnedHostRows`).
    """

    placement = "pinned"

    def __init__(self, pinned: dict[str, Tensor], device: torch.device) -> None:
        views = {k: device_view(v, device) for k, v in pinned.items()}
        for k, v in views.items():  # one row read back: the mapping works (setup only)
            if v.numel() and not torch.equal(v[:1].cpu(), pinned[k][:1]):
                raise RuntimeError(f"the device view of {k!r} reads other values")
        super().__init__(views, device)


class PinnedHostRows(LocalRows):
    """Rows in pinned host memory that the device could not map, copied per gather.

    :meth:`take` costs a host read of the indices (a host synchronisation), a gather on
    the host into a pinned staging buffer, and an asynchronous copy of it to the device.

    Args:
        pinned: ``{name: [num_rows, ...]}`` pinned host arrays.
        device: The accelerator.
    """

    placement = "pinned-host"

    def take(self, name: str, index: Tensor, out: Tensor | None = None) -> Tensor:
        """Rows ``index`` of array ``name``: gathered on the host, copied to the device."""
        a = self.arrays[name]
        staged = torch.empty((index.numel(), *a.shape[1:]), dtype=a.dtype, pin_memory=True)
        torch.index_select(a, 0, index.cpu(), out=staged)
        if out is None:
            return staged.to(self.device, non_blocking=True)
        return out.copy_(staged, non_blocking=True)


class HostRows(_ReadInPlace):
    """Rows in host memory on a CPU rank, as given (memory maps stay maps).

    The page cache, not the process, holds mapped rows; :meth:`take` costs one gather on
    the host, which is the compute device.

    Args:
        arrays: ``{name: [num_rows, ...]}`` host arrays.
        device: The host.
    """

    placement = "host"


def place_rows(arrays: dict[str, Tensor], device: torch.device,
               budget_bytes: int | None = None) -> LocalRows:
    """Place per-row arrays where ``device`` reads them.

    On the host (a CPU rank): :class:`HostRows`.  On an accelerator: :class:`DeviceRows`
    when the arrays take at most ``budget_bytes`` together (default: half its free
    memory), else :class:`PinnedRows`, or :class:`PinnedHostRows` where the runtime
    refuses to map pinned memory.

    Args:
        arrays: ``{name: [num_rows, ...]}`` host tensors (e.g. over memory maps).
        device: The compute device.
        budget_bytes: Device memory the arrays may take.
    """
    if not accelerated(device):
        return HostRows(arrays, device)
    nbytes = sum(a.numel() * a.element_size() for a in arrays.values())
    if budget_bytes is None:
        budget_bytes = free_bytes(device) // 2
    if nbytes <= budget_bytes:
        return DeviceRows(arrays, device)
    pinned = {k: pin(v) for k, v in arrays.items()}
    try:
        return PinnedRows(pinned, device)
    except (RuntimeError, TypeError, ValueError):
        return PinnedHostRows(pinned, device)
