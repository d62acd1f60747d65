"""The device shadow: CUDA's rules checked on the CPU, for tests.

A CPU test passes where a CUDA run would fail when host tensors meet device tensors, when
a collective on the device group is handed a host tensor, or when the host waits for the
device more often than the code says.  :class:`DeviceShadow` runs the CUDA code path of
gnnpar on the CPU and turns each of those into a test failure:

* the rank's device is :data:`~gnnpar.device.SHADOW_DEVICE` (``cpu:0``), which gnnpar
  treats as an accelerator (:func:`gnnpar.device.accelerated`): features and adjacency
  are placed there, pinned memory and the side stream have stand-ins;
* a ``TorchFunctionMode`` tags every tensor with where a CUDA run would hold it —
  ``device`` (made by a factory or ``.to`` with the shadow's device, or computed from a
  device tensor), ``host`` (``torch.from_numpy``, a factory without a device, ``.cpu()``),
  ``pinned`` (``pin_memory``), ``pending`` (an asynchronous device-to-host copy not yet
  waited for) — and propagates the tags through every operation; ``Tensor.device``
  reports the shadow's device for device tensors, so code that compares devices takes
  the branch it would take on a GPU;
* it raises :class:`DeviceShadowError` at the operation that mixes a device tensor with a
  host tensor of one dimension or more (CUDA's "Expected all tensors to be on the same
  device"), that reads a pending copy before a synchronisation, or that uses on the
  compute stream a tensor made on the side stream before
  :meth:`~gnnpar.device.BatchStream.hand_over`;
* a ``TorchDispatchMode`` (:class:`CollectiveLog`) sees every collective (``c10d``
  operators): one carrying a host tensor raises; each is recorded with the thread that
  issued it;
* host reads of device values are counted, each with the gnnpar line that made it:
  ``.item()``, ``int()``/``float()``/``bool()``, ``.tolist()``, ``.cpu()``, ``.numpy()``,
  printing, blocking device-to-host and host-to-device copies (``.to`` without
  ``non_blocking`` from pageable memory, ``torch.tensor(list, device=...)``), and
  operators whose output size depends on the values (``nonzero``, ``unique``,
  ``masked_select``, boolean-mask indexing, ``repeat_interleave`` without
  ``output_size``; ``bincount`` counts 2, CUDA's hidden minimum and maximum reads).

Budgets are asserted over a :meth:`DeviceShadow.window`::

    with DeviceShadow() as shadow:
        ctx = gnnpar.init(device=shadow.device)
        ...
        with shadow.window() as w:
            batch = next(batches)
        assert w.num_syncs <= 5, w.sites

Tensors made before the shadow starts, and those made inside torch's C++ code without a
Python call (DDP's buckets, autograd's gradients), are untagged: they mix with either
kind.  The shadow checks gnnpar's code, not torch's.
"""

from __future__ import annotations

import threading
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from gnnpar import device as _device

DEVICE, HOST, PINNED, PENDING = "device", "host", "pinned", "pending"
_WHERE = "_gnnpar_where"
_SIDE = "_gnnpar_side"  # side-stream sequence number of the op that made the tensor
_HANDED = "_gnnpar_handed"
_PENDING_AT = "_gnnpar_pending_at"


class DeviceShadowError(AssertionError):
    """What a CUDA run would refuse, found on the CPU by :class:`DeviceShadow`."""


def where(t: Tensor) -> str | None:
    """The shadow's tag of ``t`` (``None``: untracked)."""
    return t.__dict__.get(_WHERE)


def _tag(t: Tensor, kind: str) -> Tensor:
    t.__dict__[_WHERE] = kind
    return t


def _tensors(tree: Any) -> list[Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, Tensor)]


def _site() -> str:
    """Where the current operation was called: the innermost gnnpar line, else the caller.

    Lines of the device primitives (:mod:`gnnpar.device`, :mod:`gnnpar.storage.placement`)
    are skipped: the site is the line that called them.
    """
    frames = [f for f in traceback.extract_stack()[:-2]
              if not f.filename.replace("\\", "/").endswith((
                  "/gnnpar/shadow.py", "/gnnpar/device.py", "/gnnpar/storage/placement.py"))]
    for frame in reversed(frames):
        name = frame.filename.replace("\\", "/")
        if "/gnnpar/" in name:
            return f"{name[name.rfind('/gnnpar/') + 1:]}:{frame.lineno} {frame.name}"
    outside = [f for f in frames if "/torch/" not in f.filename.replace("\\", "/")]
    frame = (outside or frames)[-1]
    return f"{frame.filename}:{frame.lineno} {frame.name}"


@dataclass(eq=False)
class Window:
    """What happened inside one :meth:`DeviceShadow.window`.

    Attributes:
        syncs: ``{what: count}`` of host reads of device values.
        sites: ``[(what, gnnpar line)]`` of each, in order.
        collectives: ``[(operator, thread id)]`` in issue order.
    """

    syncs: Counter[str] = field(default_factory=Counter)
    sites: list[tuple[str, str]] = field(default_factory=list)
    collectives: list[tuple[str, int]] = field(default_factory=list)

    @property
    def num_syncs(self) -> int:
        """Host synchronisations counted in the window."""
        return sum(self.syncs.values())


_READS = {Tensor.item: "item", Tensor.tolist: "tolist", Tensor.numpy: "numpy",
          Tensor.__bool__: "bool", Tensor.__int__: "int", Tensor.__float__: "float",
          Tensor.__index__: "index", Tensor.__repr__: "repr", Tensor.__format__: "format",
          Tensor.__array__: "array", Tensor.__complex__: "complex"}
_SIZED_BY_VALUES = {torch.nonzero: "nonzero", Tensor.nonzero: "nonzero",
                    torch.argwhere: "nonzero", Tensor.argwhere: "nonzero",
                    torch.unique: "unique", Tensor.unique: "unique",
                    torch.unique_consecutive: "unique", Tensor.unique_consecutive: "unique",
                    torch.masked_select: "masked_select", Tensor.masked_select: "masked_select",
                    torch.equal: "equal", Tensor.equal: "equal"}
_BINCOUNT = (torch.bincount, Tensor.bincount)
_REPEAT = (torch.repeat_interleave, Tensor.repeat_interleave)
_INDEXING = (Tensor.__getitem__,)
_NEW_TENSOR = (torch.tensor, torch.as_tensor)
_DEVICE_GET = Tensor.device.__get__
_DATA_SET = Tensor.data.__set__  # type: ignore[attr-defined]  # how Module.to() swaps data


class DeviceShadow:
    """Run gnnpar's device code path on the CPU under CUDA's rules (see the module docstring).

    Args:
        memory_bytes: Free memory the shadow's device reports (placement budgets).

    Attributes:
        device: The device to give :func:`gnnpar.init` (``cpu:0``).
        total: Everything counted since the shadow started (a :class:`Window`).
    """

    def __init__(self, memory_bytes: int = 8 * 2**30) -> None:
        self.device = _device.SHADOW_DEVICE
        self.memory_bytes = memory_bytes
        self.total = Window()
        self._windows: list[Window] = [self.total]
        self._side_depth = 0
        self._side_seq = 0
        self._compute_waited = 0
        self._syncs_seen = 0
        self._modes: tuple[Any, ...] = (_Functions(self), CollectiveLog(self._collective))

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> DeviceShadow:
        _device._set_shadow(self)
        self._saved = {name: getattr(torch, name) for name in _HOST_MAKERS}
        for name, original in self._saved.items():
            setattr(torch, name, _host_maker(original))
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
        for name, original in self._saved.items():
            setattr(torch, name, original)
        _device._set_shadow(None)

    @contextmanager
    def window(self) -> Iterator[Window]:
        """Count what happens inside the block (windows nest; each sees its own)."""
        w = Window()
        self._windows.append(w)
        try:
            yield w
        finally:
            self._windows.remove(w)

    # ------------------------------------------------------------------ accounting
    def sync(self, what: str, times: int = 1) -> None:
        """Count a host read of device values (completes pending copies)."""
        site = _site()
        for w in self._windows:
            w.syncs[what] += times
            w.sites.extend([(what, site)] * times)
        self._syncs_seen += 1

    def fail(self, message: str) -> None:
        """Raise :class:`DeviceShadowError` naming the gnnpar line."""
        raise DeviceShadowError(f"{message} (at {_site()})")

    def _collective(self, name: str, tensors: list[Tensor]) -> None:
        """A collective: no host tensor in it; counted in every window."""
        for t in tensors:
            if where(t) in (HOST, PINNED, PENDING):
                self.fail(f"collective {name} carries a {where(t)} tensor of shape "
                          f"{tuple(t.shape)}: NCCL takes device tensors only")
        for w in self._windows:
            w.collectives.append((name, threading.get_ident()))

    # ------------------------------------------------------------------ device hooks
    def device_alias(self, t: Tensor) -> Tensor:
        """A device-tagged alias of pinned host memory (UVA's stand-in)."""
        if where(t) != PINNED:
            self.fail("device_view of memory that is not pinned")
        return _tag(t.view_as(t), DEVICE)

    def enter_side_stream(self) -> None:
        """Work from now on is issued on the side stream."""
        self._side_depth += 1

    def exit_side_stream(self) -> None:
        """Back on the compute stream."""
        self._side_depth -= 1

    def hand_over(self, tensors: list[Tensor]) -> None:
        """The compute stream waits for the side stream's work so far and takes ``tensors``."""
        self._compute_waited = self._side_seq
        for t in tensors:
            t.__dict__[_HANDED] = True

    # ------------------------------------------------------------------ checks
    def check_inputs(self, func: Any, inputs: list[Tensor]) -> list[str | None]:
        """Tags of ``inputs``; raise on mixing, unwaited copies and unhanded side tensors."""
        tags = [where(t) for t in inputs]
        name = getattr(func, "__name__", str(func))
        if DEVICE in tags:
            for t, tag in zip(inputs, tags, strict=True):
                if tag in (HOST, PINNED, PENDING) and t.dim() > 0:
                    self.fail(f"{name} mixes a device tensor with a {tag} tensor of shape "
                              f"{tuple(t.shape)}: CUDA needs both on one device")
        for t, tag in zip(inputs, tags, strict=True):
            if tag == PENDING and t.__dict__.get(_PENDING_AT, 0) >= self._syncs_seen:
                self.fail(f"{name} reads an asynchronous device-to-host copy before any "
                          "synchronisation completed it")
        if self._side_depth == 0:
            for t in inputs:
                seq = t.__dict__.get(_SIDE)
                if seq is None:
                    continue
                if seq > self._compute_waited:
                    self.fail(f"{name} uses on the compute stream a tensor the side stream "
                              "made after the compute stream last waited for it")
                if not t.__dict__.get(_HANDED) and where(t) == DEVICE:
                    self.fail(f"{name} uses on the compute stream a side-stream tensor "
                              "that was not handed over (record_stream)")
        return tags

    def mark(self, out: Any, kind: str | None, inputs: list[Tensor]) -> None:
        """Tag the new tensors of ``out`` as ``kind`` and with the stream that made them."""
        ids = {id(t) for t in inputs}
        self._side_seq += self._side_depth > 0
        for t in _tensors(out):
            if id(t) in ids:
                continue  # an in-place result: it keeps its tag and stream
            if kind is not None:
                _tag(t, kind)
            t.__dict__[_SIDE] = self._side_seq if self._side_depth else None
            t.__dict__.pop(_HANDED, None)


_HOST_MAKERS = ("from_numpy", "frombuffer")
"""torch functions that wrap host memory and are not seen by a function mode."""


def _host_maker(original: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def wrapped(*args: Any, **kwargs: Any) -> Tensor:
        return _tag(original(*args, **kwargs), HOST)
    return wrapped


def _device_arg(value: Any) -> torch.device | None:
    if isinstance(value, (str, torch.device)):
        return torch.device(value)
    return None


class _Functions(TorchFunctionMode):
    """The shadow's tags, checks and counts at the level of torch's Python API."""

    def __init__(self, shadow: DeviceShadow) -> None:
        super().__init__()
        self.s = shadow

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = dict(kwargs or {})
        s = self.s
        if func == _DEVICE_GET:
            t = args[0]
            return s.device if where(t) == DEVICE else func(*args, **kwargs)
        if func == _DATA_SET:  # the parameter now holds the new data: it is where that is
            out = func(*args, **kwargs)
            if where(args[1]) is not None:
                _tag(args[0], where(args[1]) or "")
            return out
        if func is Tensor.is_pinned:
            return where(args[0]) == PINNED or func(*args, **kwargs)
        special = _SPECIAL.get(func)
        if special is not None:
            return special(s, func, args, kwargs)
        inputs = _tensors((args, kwargs))
        tags = s.check_inputs(func, inputs)
        on_device = DEVICE in tags
        pinned = bool(kwargs.pop("pin_memory", False))
        target = _device_arg(kwargs.get("device"))
        if on_device:
            self._count(func, args, kwargs)
        elif func in _NEW_TENSOR and target == s.device and not (
                args and isinstance(args[0], Tensor)):
            s.sync("blocking host-to-device copy (torch.tensor)")
        out = func(*args, **kwargs)
        internal = isinstance(func, torch._ops.OpOverload)  # torch's C++ calling back
        if pinned:
            kind: str | None = PINNED
        elif internal and not on_device and not tags:
            kind = None
        elif target is not None:
            kind = DEVICE if target == s.device else HOST
        elif on_device:
            kind = DEVICE
        elif any(t in (HOST, PINNED, PENDING) for t in tags) or not inputs:
            kind = HOST
        else:
            kind = None
        if func is Tensor.__iter__:  # elements of a tracked tensor keep its tag
            items = list(out)
            s.mark(items, kind, inputs)
            return iter(items)
        s.mark(out, kind, inputs)
        return out

    def _count(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Count the host reads an operation on device tensors makes."""
        s = self.s
        if func in _SIZED_BY_VALUES:
            s.sync(_SIZED_BY_VALUES[func])
        elif func in _BINCOUNT:
            s.sync("bincount (min and max)", 2)
        elif func in _REPEAT and kwargs.get("output_size") is None and (
                len(args) > 1 and isinstance(args[1], Tensor) or isinstance(
                    kwargs.get("repeats"), Tensor) or func is torch.repeat_interleave
                and len(args) == 1):
            s.sync("repeat_interleave without output_size")
        elif func is torch.where and len(args) == 1:
            s.sync("nonzero")
        elif func in _INDEXING:
            index = args[1] if len(args) > 1 else None
            parts = index if isinstance(index, tuple) else (index,)
            if any(isinstance(i, Tensor) and i.dtype == torch.bool and i.dim() > 0
                   for i in parts):
                s.sync("boolean-mask indexing")


def _read(s: DeviceShadow, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A value read on the host: a synchronisation when the tensor is on the device."""
    t = args[0]
    s.check_inputs(func, [t])
    if where(t) == DEVICE:
        s.sync(_READS[func])
    return func(*args, **kwargs)


def _cpu(s: DeviceShadow, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    t = args[0]
    s.check_inputs(func, [t])
    if where(t) != DEVICE:
        return func(*args, **kwargs)
    s.sync("device-to-host copy (.cpu)")
    out = t.detach().clone().requires_grad_(t.requires_grad) if t.requires_grad else t.clone()
    s.mark(out, HOST, [])
    return out


def _basic(index: Any) -> bool:
    """Whether an index is basic (ints, slices, ``None``, ``...``): no index tensor."""
    parts = index if isinstance(index, tuple) else (index,)
    return not any(isinstance(i, (Tensor, list)) for i in parts)


def _setitem(s: DeviceShadow, func: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
    """``t[index] = value``: with a basic index a copy (``copy_``), else ``index_put_``."""
    t, index, value = args[0], args[1], args[2]
    if _basic(index) and isinstance(value, Tensor) and where(t) != where(value):
        view = t[index]
        if where(t) is not None:
            _tag(view, where(t) or "")
        return _copy(s, Tensor.copy_, (view, value), {})
    inputs = _tensors((args, kwargs))
    if DEVICE in s.check_inputs(func, inputs) and not _basic(index):
        parts = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, Tensor) and i.dtype == torch.bool and i.dim() > 0
               for i in parts):
            s.sync("boolean-mask indexing")
    return func(*args, **kwargs)


def _pin(s: DeviceShadow, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    t = args[0]
    s.check_inputs(func, [t])
    if where(t) == DEVICE:
        s.fail("pin_memory of a device tensor")
    out = t.clone()
    s.mark(out, PINNED, [])
    return out


def _to_args(args: tuple[Any, ...], kwargs: dict[str, Any]
             ) -> tuple[torch.device | None, torch.dtype | None, bool, bool]:
    """``(device, dtype, non_blocking, copy)`` of a ``Tensor.to`` call."""
    dev = _device_arg(kwargs.get("device"))
    dtype = kwargs.get("dtype")
    non_blocking = bool(kwargs.get("non_blocking", False))
    positional = list(args[1:])
    for a in positional:
        if isinstance(a, Tensor):
            dev, dtype = _device.SHADOW_DEVICE if where(a) == DEVICE else a.device, a.dtype
        elif isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, bool):
            non_blocking = a
        elif _device_arg(a) is not None:
            dev = _device_arg(a)
    bools = [a for a in positional if isinstance(a, bool)]
    copy = bool(kwargs.get("copy", bools[1] if len(bools) > 1 else False))
    return dev, dtype, non_blocking, copy


def _to(s: DeviceShadow, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    t = args[0]
    tag = s.check_inputs(func, [t])[0]
    dev, dtype, non_blocking, copy = _to_args(args, kwargs)
    dtype = dtype or t.dtype
    if dev is None:  # a dtype conversion: stays where it is
        out = t.to(dtype, copy=copy)
        s.mark(out, tag, [t])
        return out
    if dev == s.device:
        if tag == DEVICE:
            out = t.to(dtype, copy=copy)
            s.mark(out, DEVICE, [t])
            return out
        if tag == HOST or (tag == PINNED and not non_blocking):
            s.sync("blocking host-to-device copy")
        out = t.to(dtype, copy=True)
        s.mark(out, DEVICE, [])
        return out
    if dev.type == "cpu" and tag == DEVICE:
        out = t.to(dtype, copy=True)
        if non_blocking:
            out.__dict__[_PENDING_AT] = s._syncs_seen
            s.mark(out, PENDING, [])
        else:
            s.sync("device-to-host copy (.to)")
            s.mark(out, HOST, [])
        return out
    out = func(*args, **kwargs)
    s.mark(out, tag if dev.type == "cpu" else None, [t])
    return out


def _copy(s: DeviceShadow, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``dst.copy_(src)``: the one operation that crosses devices on purpose."""
    dst, src = args[0], args[1]
    non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
    s.check_inputs(func, [src])
    d, t = where(dst), where(src)
    if d == DEVICE and t in (HOST, PINNED) and not (t == PINNED and non_blocking):
        s.sync("blocking host-to-device copy (copy_)")
    if d in (HOST, PINNED) and t == DEVICE:
        if non_blocking and d == PINNED:
            dst.__dict__[_PENDING_AT] = s._syncs_seen
            _tag(dst, PENDING)
        else:
            s.sync("device-to-host copy (copy_)")
    return func(*args, **kwargs)


_SPECIAL: dict[Any, Callable[[DeviceShadow, Any, tuple[Any, ...], dict[str, Any]], Any]] = {
    **dict.fromkeys(_READS, _read), Tensor.cpu: _cpu, Tensor.pin_memory: _pin,
    Tensor.to: _to, Tensor.copy_: _copy, Tensor.__setitem__: _setitem}


class CollectiveLog(TorchDispatchMode):
    """Inside ``with``, every collective (``c10d`` operator): its name, devices and thread.

    Used by :class:`DeviceShadow` (which also fails on host tensors) and on its own on a
    GPU, where the tensors' real devices tell.

    Attributes:
        entries: ``[(operator, devices of its tensors, thread id)]`` in issue order.
    """

    def __init__(self, check: Callable[[str, list[Tensor]], None] | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.entries: list[tuple[str, tuple[str, ...], int]] = []
        self._check = check

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func.namespace in ("c10d", "_c10d_functional"):
            name = func._schema.name.split("::")[-1]
            tensors = _tensors((args, kwargs))
            if self._check is not None:
                self._check(name, tensors)
            self.entries.append((name, tuple(sorted({str(t.device) for t in tensors})),
                                 threading.get_ident()))
        return func(*args, **kwargs)
