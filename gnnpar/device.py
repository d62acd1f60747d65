"""Where a rank's tensors live, and how the hot path moves them without waiting.

gnnpar runs one process per device.  Everything a step reads — the part's adjacency, the
partition book, feature rows, embeddings, a batch's ids — lives on the rank's device
(:attr:`~gnnpar.distributed.DistContext.device`); the host only holds what it reads
itself (split sizes, counts it must know to size a collective) and memory maps.  This
module is the one place that knows what "the device" is:

* :func:`accelerated` — whether a device is an accelerator (CUDA, or the device shadow's
  stand-in, :data:`SHADOW_DEVICE`) rather than the host;
* :func:`load_rows` — a memory-mapped array copied onto the device in chunks, with no
  host copy left behind;
* :func:`place` — rows on the device when they fit a budget, else pinned host memory the
  device reads directly (:func:`device_view`: CUDA's unified virtual addressing, as DGL
  and GraphBolt read pinned features), so a gather never brings indices to the host;
* :class:`BatchStream` — a side stream on which the next batch is sampled and gathered
  while the compute stream trains on the current one, with
  :meth:`BatchStream.hand_over` making the compute stream wait for it and keeping the
  handed tensors' memory safe (``Tensor.record_stream``, PyTorch's CUDA semantics).  On
  the CPU it is a no-op; the same code path runs.

**The device shadow.**  CPU tests run the CUDA code path through
:class:`gnnpar.testing.DeviceShadow`: the rank's device is then :data:`SHADOW_DEVICE`
(``cpu:0``, host memory that gnnpar treats as an accelerator's), the shadow tags every
tensor placed there and everything computed from it, and fails a test on what CUDA would
refuse or wait for (mixed devices, host tensors in collectives, host reads of device
values beyond a budget, a side stream's tensor used before its hand-over).  The shadow
registers itself here (:func:`_set_shadow`) so that pinning, free memory and streams have
a stand-in on the CPU; nothing else in gnnpar knows about it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from gnnpar.io import release
from gnnpar.ops import from_mmap

SHADOW_DEVICE = torch.device("cpu", 0)
"""The device shadow's stand-in for an accelerator: host memory, tracked as device memory."""

LOAD_CHUNK_BYTES = 64 * 2**20
"""Bytes copied per chunk by :func:`load_rows` (a bounded host staging buffer)."""


class Shadow(Protocol):
    """What the device shadow provides to this module (:class:`gnnpar.testing.DeviceShadow`)."""

    device: torch.device
    memory_bytes: int

    def device_alias(self, t: Tensor) -> Tensor:
        """A device-tagged alias of pinned host memory (UVA's stand-in)."""

    def enter_side_stream(self) -> None:
        """Work issued from now on runs on the side stream."""

    def exit_side_stream(self) -> None:
        """Back to the compute stream."""

    def hand_over(self, tensors: list[Tensor]) -> None:
        """The compute stream waits for the side stream and takes these tensors."""


_shadow: Shadow | None = None


def _set_shadow(shadow: Shadow | None) -> None:
    """Register (or, with ``None``, remove) the active device shadow (tests only)."""
    global _shadow
    _shadow = shadow


def accelerated(device: torch.device) -> bool:
    """Whether ``device`` is an accelerator (CUDA, or the active shadow's device)."""
    if device.type == "cuda":
        return True
    return _shadow is not None and device == _shadow.device


def free_bytes(device: torch.device) -> int:
    """Free memory of an accelerator in bytes (CUDA's ``mem_get_info``)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if _shadow is not None and device == _shadow.device:
        return _shadow.memory_bytes
    raise ValueError(f"{device} is not an accelerator")


def load_rows(array: np.ndarray | Tensor, device: torch.device,
              dtype: torch.dtype | None = None) -> Tensor:
    """``array`` (e.g. a memory map) as a new tensor on ``device``, copied in chunks.

    At most :data:`LOAD_CHUNK_BYTES` of it is staged in host memory at a time, so a
    device that holds the array leaves no host copy behind; on the CPU the result is an
    in-memory copy.  A memory map's pages leave the process once read
    (:func:`gnnpar.io.release`), so they are not counted twice.

    Args:
        array: ``[n, ...]`` host array or tensor.
        device: Where the tensor goes.
        dtype: Its dtype (default: the array's).
    """
    src = from_mmap(array) if isinstance(array, np.ndarray) else array
    out = torch.empty(src.shape, dtype=dtype or src.dtype, device=device)
    row_bytes = max(src.element_size() * math.prod(src.shape[1:]), 1)
    step = max(1, LOAD_CHUNK_BYTES // row_bytes)
    for a in range(0, src.shape[0], step):
        out[a:a + step] = src[a:a + step].to(device, out.dtype)
        if isinstance(array, np.ndarray):
            release(array)
    return out


def device_view(pinned: Tensor, device: torch.device) -> Tensor:
    """A ``device`` tensor over pinned host memory, read by device kernels in place.

    CUDA's unified virtual addressing: a pinned host buffer has a device address, so
    ``index_select`` on this view runs on the GPU and pulls only the selected rows over
    PCIe/NVLink, without host indices or a host synchronisation (DGL's and GraphBolt's
    "UVA" feature fetching).  The view keeps ``pinned`` alive; any dtype (the bytes are
    mapped, then viewed in ``pinned``'s dtype).

    Raises:
        RuntimeError: When the tensor is not pinned and contiguous, or the CUDA runtime
            refuses the address (then gather through the host instead).
    """
    if _shadow is not None and device == _shadow.device:
        return _shadow.device_alias(pinned)
    if not pinned.is_pinned() or not pinned.is_contiguous():
        raise RuntimeError("device_view needs a contiguous pinned tensor")
    raw = pinned.view(torch.uint8).view(-1)
    mapped: Tensor = torch.as_tensor(_PinnedBytes(pinned, raw), device=device)
    return mapped.view(pinned.dtype).view(pinned.shape)


class _PinnedBytes:
    """``__cuda_array_interface__`` of a pinned host buffer's bytes (its UVA address)."""

    def __init__(self, pinned: Tensor, raw: Tensor) -> None:
        self.pinned = pinned  # keeps the memory alive as long as the view
        self.__cuda_array_interface__ = {"shape": (raw.numel(),), "typestr": "|u1",
                                         "data": (raw.data_ptr(), False), "version": 3,
                                         "strides": None}


def pin(t: Tensor) -> Tensor:
    """A pinned (page-locked) host copy of ``t``, which a device reads asynchronously."""
    return t.pin_memory()


def place(arrays: dict[str, Tensor], device: torch.device,
          budget_bytes: int | None) -> tuple[str, dict[str, Tensor]]:
    """Put per-row arrays where a device reads them: its memory, pinned host, or as they are.

    On the host (a CPU rank) the arrays stay as given (memory maps stay maps: the page
    cache holds them).  On an accelerator they are copied to the device when they take at
    most ``budget_bytes`` together (default: half its free memory), else pinned and read
    through :func:`device_view`; where the runtime refuses the view, the pinned rows are
    gathered on the host (``"pinned-host"``: one host read of the indices per gather).

    Returns:
        ``(placement, arrays)``: ``"host"``, ``"device"``, ``"pinned"`` or
        ``"pinned-host"``, and the arrays to index (on ``device`` except for
        ``"host"`` and ``"pinned-host"``).
    """
    if not accelerated(device):
        return "host", arrays
    nbytes = sum(a.numel() * a.element_size() for a in arrays.values())
    if budget_bytes is None:
        budget_bytes = free_bytes(device) // 2
    if nbytes <= budget_bytes:
        return "device", {k: load_rows(v, device) for k, v in arrays.items()}
    pinned = {k: pin(v) for k, v in arrays.items()}
    try:
        views = {k: device_view(v, device) for k, v in pinned.items()}
        for k, v in views.items():  # one row read back: the mapping works (setup only)
            if v.numel() and not torch.equal(v[:1].cpu(), pinned[k][:1]):
                raise RuntimeError(f"the device view of {k!r} reads other values")
    except (RuntimeError, TypeError, ValueError):
        return "pinned-host", pinned
    return "pinned", views


class PlacedRows:
    """Per-row arrays where a device reads them (:func:`place`), gathered by row index.

    What the feature store, the embeddings and the sampler's edge features share: the
    placement decision and the one gather that serves every placement.

    Args:
        arrays: ``{name: [n, ...]}`` rows (tensors, e.g. over memory maps).
        device: Where gathered rows are returned.
        budget_bytes: Device budget of :func:`place`.

    Attributes:
        placement: :func:`place`'s placement.
        arrays: The placed arrays by name.
    """

    def __init__(self, arrays: dict[str, Tensor], device: torch.device,
                 budget_bytes: int | None = None) -> None:
        self.device = device
        self.placement, self.arrays = place(arrays, device, budget_bytes)

    def take(self, name: str, index: Tensor, out: Tensor | None = None) -> Tensor:
        """Rows ``index`` (on :attr:`device`) of array ``name``, on the device (into ``out``).

        Every placement but ``"pinned-host"`` gathers straight into the result; that one
        reads the indices on the host (a synchronisation), gathers into a pinned staging
        buffer and copies it asynchronously.
        """
        a = self.arrays[name]
        if self.placement != "pinned-host":
            return torch.index_select(a, 0, index, out=out) if out is not None else \
                a.index_select(0, index)
        staged = torch.empty((index.numel(), *a.shape[1:]), dtype=a.dtype, pin_memory=True)
        torch.index_select(a, 0, index.cpu(), out=staged)
        if out is None:
            return staged.to(self.device, non_blocking=True)
        return out.copy_(staged, non_blocking=True)


def upload(t: Tensor, device: torch.device) -> Tensor:
    """A host tensor on ``device`` without the host waiting (pinned, asynchronous copy)."""
    if not accelerated(device):
        return t.to(device)
    return pin(t).to(device, non_blocking=True)


class BatchStream(AbstractContextManager["BatchStream"]):
    """A side stream for preparing batches while the compute stream trains.

    ``with stream:`` runs the enclosed work (sampling, gathers, their collectives and
    host reads) on the side stream, so a host read there waits for the side stream's work
    only, never for the training queued on the compute stream.  :meth:`hand_over` makes
    the compute stream wait for everything issued on the side stream so far and records
    the handed tensors as used by the compute stream, so their memory is not reused by
    the side stream before the compute stream is done with it.  On the CPU both are
    no-ops.

    Args:
        device: The rank's device.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._stream = (torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
                        if device.type == "cuda" else None)
        self._ctx: Any = nullcontext()

    def __enter__(self) -> BatchStream:
        if self._stream is not None:
            self._ctx = torch.cuda.stream(self._stream)
            self._ctx.__enter__()
        elif _shadow is not None and self.device == _shadow.device:
            _shadow.enter_side_stream()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._stream is not None:
            self._ctx.__exit__(kind, exc, tb)
            self._ctx = nullcontext()
        elif _shadow is not None and self.device == _shadow.device:
            _shadow.exit_side_stream()

    def hand_over(self, tensors: Iterable[Any]) -> None:
        """The compute stream waits for the side stream and takes ``tensors`` over."""
        handed = [t for t in tensors if isinstance(t, Tensor)]
        if self._stream is not None:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_stream(self._stream)
            for t in handed:
                if t.device.type == "cuda":
                    t.record_stream(compute)
        elif _shadow is not None and self.device == _shadow.device:
            _shadow.hand_over(handed)
