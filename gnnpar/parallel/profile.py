"""Profile a model once on the meta device, as input to the layout planner.

:func:`profile_model` runs one forward of the whole model on ``meta`` tensors (no memory,
no compute) with the parameters swapped for meta copies (``functional_call``), and
records, per pipeline unit:

- the **parameters** it owns and which dimension the tensor-parallel plan splits;
- the **activations** autograd saves for backward (bytes at the profiled batch), split
  into those a tensor-parallel rank holds whole and those it holds ``1/tp`` of;
- its **output** size (what a pipeline stage sends to the next one);
- its **matmul FLOPs**, whole and tensor-parallel;
- the **tensor-parallel collectives** its planned linears run, with their sizes.

Which tensors are split under tensor parallelism is tracked by propagation: a tensor is
split when any operand of the operation that made it is split (a planned parameter, or
an activation made from one), until a row-parallel (or output-gathering) module returns
it whole.  Everything scales linearly with the batch, so a layout's figures are these
divided by its number of batch slices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleOutput,
    RowwiseParallel,
)
from torch.func import functional_call
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from gnnpar.parallel.measure import is_parameter
from gnnpar.parallel.tensor_parallel import TensorParallelPlan, sharded_dims


@dataclass(frozen=True)
class ParamInfo:
    """One parameter: its name, shape, element size, unit and tensor-parallel dimension."""

    name: str
    shape: tuple[int, ...]
    element_size: int
    unit: str
    tp_dim: int | None


@dataclass
class UnitProfile:
    """What one pipeline unit costs at the profiled batch size (all figures in bytes/FLOPs).

    Attributes:
        name: Unit name (``""`` for parameters outside every unit).
        flops: Forward matmul FLOPs of the parts every tensor-parallel rank repeats.
        tp_flops: Forward matmul FLOPs that tensor parallelism divides by ``tp``.
        saved: Activation bytes saved for backward that each tp rank holds whole.
        tp_saved: Activation bytes saved for backward that tensor parallelism splits.
        output_bytes: Bytes of the unit's output activation (whole).
        output: The output as a meta tensor (shape and dtype), ``None`` before profiling.
        output_split: Whether tensor parallelism splits the output over its last
            dimension (a pipeline stage then sends ``1/tp`` of it).
        tp_collectives: ``(kind, bytes)`` of each tensor-parallel collective of one
            forward plus backward, ``kind`` in ``"all_reduce"``, ``"all_gather"``.
    """

    name: str
    flops: float = 0.0
    tp_flops: float = 0.0
    saved: int = 0
    tp_saved: int = 0
    output_bytes: int = 0
    output: torch.Tensor | None = None
    output_split: bool = False
    tp_collectives: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class ModelProfile:
    """Result of :func:`profile_model`.

    Attributes:
        batch_size: Batch size of the profiled input (dimension 0).
        params: Every parameter.
        units: Unit profiles in execution order (the pipeline cut points).
    """

    batch_size: int
    params: list[ParamInfo]
    units: list[UnitProfile]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class _Tracker(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Propagates "split by tensor parallelism" and counts matmul FLOPs per unit."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.split: dict[int, torch.Tensor] = {}  # id -> tensor (kept alive: ids stay unique)
        self.unit: UnitProfile | None = None

    def mark(self, t: torch.Tensor, split: bool) -> None:
        if split:
            self.split[id(t)] = t
        else:
            self.split.pop(id(t), None)

    def is_split(self, t: torch.Tensor) -> bool:
        return id(t) in self.split

    def __torch_dispatch__(  # noqa: D105
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        split = any(isinstance(a, torch.Tensor) and self.is_split(a) for a in tree_leaves(args))
        for o in tree_leaves(out):
            if isinstance(o, torch.Tensor):
                self.mark(o, split)
        count = flop_registry.get(func._overloadpacket)
        if count is not None and self.unit is not None:
            flops = float(count(*args, **kwargs, out_val=out))
            if split:
                self.unit.tp_flops += flops
            else:
                self.unit.flops += flops
        return out


def _style_collectives(
    style: ParallelStyle, inp: torch.Tensor, out: torch.Tensor
) -> tuple[list[tuple[str, int]], bool]:
    """Collectives of one planned module (forward + backward) and whether its output is split."""
    comms: list[tuple[str, int]] = []
    if isinstance(style, ColwiseParallel):
        if inp.requires_grad:  # backward: partial input gradients are summed
            comms.append(("all_reduce", _nbytes(inp)))
        gathered = not isinstance(style.output_layouts[0], Shard)
        if gathered:
            comms.append(("all_gather", _nbytes(out)))
        return comms, not gathered
    if isinstance(style, RowwiseParallel):
        out_layout = style.output_layouts[0]
        if isinstance(out_layout, Replicate):
            comms.append(("all_reduce", _nbytes(out)))
        return comms, isinstance(out_layout, Partial)
    if isinstance(style, PrepareModuleOutput):
        layouts = style.output_layouts or ()
        if layouts and isinstance(layouts[0], Partial):
            comms.append(("all_reduce", _nbytes(out)))
            return comms, False
    return comms, False


def profile_model(
    model: nn.Module,
    example_input: torch.Tensor,
    units: list[str],
    plan: TensorParallelPlan | None = None,
) -> ModelProfile:
    """Profile ``model`` on ``example_input`` (any device) without running it for real.

    Args:
        model: The whole model; it is not modified.
        example_input: One global batch (or one of the same shape and dtype).
        units: Pipeline units in execution order; ``[]`` means one unit, the model.
        plan: Tensor-parallel plan whose split tensors to track (``None``: none).

    Returns:
        The profile at ``example_input``'s batch size.

    Shapes:
        example_input ``[B, *]``.
    """
    plan = plan or {}
    modules = dict(model.named_modules())
    units = units or [""]
    profiles = {u: UnitProfile(u) for u in units}
    tracker = _Tracker()

    meta_params: dict[str, torch.Tensor] = {}
    infos: list[ParamInfo] = []
    owner = {}
    for u in units:
        if modules.get(u) is not None:
            for n, _ in modules[u].named_parameters():
                owner[f"{u}.{n}" if u else n] = u
    for name, p in model.named_parameters():
        mod_name, _, leaf = name.rpartition(".")
        style = plan.get(mod_name)
        dim = sharded_dims(modules[mod_name], style).get(leaf) if style is not None else None
        meta = torch.empty_like(p, device="meta").requires_grad_(p.requires_grad)
        tracker.mark(meta, dim is not None)
        meta_params[name] = meta
        infos.append(ParamInfo(name, tuple(p.shape), p.element_size(), owner.get(name, ""), dim))

    # Planned-module hooks first: a unit's own hook then sees its final split state.
    handles = []
    for name, style in plan.items():

        def planned(mod: nn.Module, args: Any, out: Any, style: ParallelStyle = style) -> None:
            inp = next(a for a in tree_leaves(args) if isinstance(a, torch.Tensor))
            comms, split = _style_collectives(style, inp, out)
            if tracker.unit is not None:
                tracker.unit.tp_collectives += comms
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    tracker.mark(t, split)

        handles.append(modules[name].register_forward_hook(planned))
    for u in units:
        if modules.get(u) is None:
            continue

        def enter(mod: nn.Module, args: Any, u: str = u) -> None:
            tracker.unit = profiles[u]

        def leave(mod: nn.Module, args: Any, out: torch.Tensor, u: str = u) -> None:
            profiles[u].output_bytes = _nbytes(out)
            profiles[u].output = out.detach()
            profiles[u].output_split = tracker.is_split(out)

        handles += [modules[u].register_forward_pre_hook(enter),
                    modules[u].register_forward_hook(leave)]

    seen: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        base = t._base if t._base is not None else t  # views share their base's memory
        if tracker.unit is not None and not is_parameter(t) and id(base) not in seen:
            seen[id(base)] = base
            if tracker.is_split(t):
                tracker.unit.tp_saved += _nbytes(t)
            else:
                tracker.unit.saved += _nbytes(t)
        return t

    x = torch.empty_like(example_input, device="meta")
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), tracker:
            if units == [""]:
                tracker.unit = profiles[""]
            functional_call(model, meta_params, (x,))
    finally:
        for h in handles:
            h.remove()
    return ModelProfile(int(example_input.shape[0]), infos, [profiles[u] for u in units])
