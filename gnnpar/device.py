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
* :func:`pin` and :func:`device_view` — pinned host memory that the device reads directly
  (CUDA's unified virtual addressing, as DGL and GraphBolt read pinned features), so a
  gather never brings indices to the host; :mod:`gnnpar.storage.placement` places row
  arrays with them;
* :class:`BatchStream` — a side stream on which the next batch is sampled and gathered
  while the compute stream trains on the current one, with
  :meth:`BatchStream.hand_over` making the compute stream wait for it and keeping the
  handed tensors' memory safe (``Tensor.record_stream``, PyTorch's CUDA semantics).  On
  the CPU it is a no-op; the same code path runs.

**The device shadow.**  CPU tests run the CUDA code path through
:class:`gnnpar.shadow.DeviceShadow`: the rank's device is then :data:`SHADOW_DEVICE`
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

from gnnpar.artifacts.arrays import release
from gnnpar.ops import from_mmap

SHADOW_DEVICE = torch.device("cpu", 0)
"""The device shadow's stand-in for an accelerator: host memory, tracked as device memory."""

LOAD_CHUNK_BYTES = 64 * 2**20
"""Bytes copied per chunk by :func:`load_rows` (a bounded host staging buffer)."""


class Shadow(Protocol):
    """What the device shadow provides to this module (:class:`gnnpar.shadow.DeviceShadow`)."""

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
    (:func:`gnnpar.artifacts.arrays.release`), so they are not counted twice.

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
