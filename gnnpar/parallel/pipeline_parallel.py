"""Pipeline parallelism: cut a model into stages and run GPipe or 1F1B over micro-batches.

A model is a sequence of *units* — the modules a pipeline may cut between: the children
of an ``nn.Sequential``, or what a model lists in ``pipeline_units()`` (the embeddings,
each transformer block, the final norm and the head of
:class:`~gnnpar.parallel.models.TransformerLM`).  :func:`split_units` assigns contiguous
runs of units to stages so that the largest stage holds as few parameters as possible;
:func:`prune_to_stage` deletes, in place, every unit a stage does not hold, so the kept
parameters keep their single-device names (as in torchtitan's ``pipeline_module_split``).
:func:`build_schedule` wraps the stage in torch's ``PipelineStage`` and a
``ScheduleGPipe`` / ``Schedule1F1B`` over the ``pp`` group; both average the loss over
micro-batches, so a step's gradients equal those of one pass over the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.pipelining.schedules import PipelineScheduleSingle

from gnnpar.errors import ConfigError
from gnnpar.parallel.config import ParallelConfig
from gnnpar.parallel.profile import ModelProfile
from gnnpar.parallel.tensor_parallel import shard_size

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def pipeline_units(model: nn.Module) -> list[str]:
    """Names of the modules a pipeline may cut between, in execution order.

    Args:
        model: An ``nn.Sequential`` or a model with a ``pipeline_units()`` method.

    Returns:
        Module names relative to ``model``.

    Raises:
        ConfigError: For a model that is neither.
    """
    units = getattr(model, "pipeline_units", None)
    if callable(units):
        return list(units())
    if isinstance(model, nn.Sequential):
        return list(model._modules)
    raise ConfigError(
        f"cannot cut a {type(model).__name__} into pipeline stages.",
        field="model",
        fix="use an nn.Sequential, give the model a pipeline_units() method listing its "
        "sequential parts, or pass stage_units=[[names of stage 0], ...].",
    )


def units_or_empty(model: nn.Module) -> list[str]:
    """:func:`pipeline_units` of ``model``, or ``[]`` when it cannot be cut into stages."""
    try:
        return pipeline_units(model)
    except ConfigError:
        return []


def split_units(
    units: Sequence[str], weights: Sequence[int], num_stages: int
) -> list[list[str]]:
    """Contiguous runs of units, one per stage, minimising the largest stage weight.

    Args:
        units: Unit names in execution order.
        weights: Weight of each unit (its parameter count).
        num_stages: Number of stages; at most ``len(units)``.

    Returns:
        ``num_stages`` non-empty lists of unit names.

    Raises:
        ConfigError: If there are fewer units than stages.
    """
    n = len(units)
    if num_stages > n:
        raise ConfigError(
            f"pp={num_stages} stages but the model has only {n} pipeline units {list(units)}.",
            field="pp",
            fix=f"use pp <= {n}, or a model with more layers.",
        )
    prefix = [0]
    for w in weights:
        prefix.append(prefix[-1] + int(w))
    inf = float("inf")
    # best[k][i]: smallest possible max-stage weight for units[:i] cut into k stages.
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(num_stages + 1)]
    best[0][0] = 0
    for k in range(1, num_stages + 1):
        for i in range(k, n - (num_stages - k) + 1):
            for j in range(k - 1, i):
                cost = max(best[k - 1][j], prefix[i] - prefix[j])
                if cost < best[k][i]:
                    best[k][i], cut[k][i] = cost, j
    bounds = [n]
    for k in range(num_stages, 0, -1):
        bounds.append(cut[k][bounds[-1]])
    bounds.reverse()
    return [list(units[bounds[s]:bounds[s + 1]]) for s in range(num_stages)]


def stage_units_of(model: nn.Module, num_stages: int) -> list[list[str]]:
    """The balanced split of ``model``'s units (by parameter count) into stages."""
    units = pipeline_units(model)
    modules = dict(model.named_modules())
    weights = [
        sum(p.numel() for p in modules[u].parameters()) if modules.get(u) is not None else 0
        for u in units
    ]
    return split_units(units, weights, num_stages)


def prune_to_stage(model: nn.Module, keep: Sequence[str], units: Sequence[str]) -> nn.Module:
    """Delete, in place, every unit of ``model`` not in ``keep``.

    Units inside an ``nn.ModuleDict`` / ``nn.Sequential`` are removed from it; other
    units are set to ``None`` (the model's forward must skip ``None`` parts).  Modules
    that are not units are left alone.

    Args:
        model: The whole model.
        keep: Units this stage holds.
        units: All units of the model.

    Returns:
        ``model``, holding only its stage.
    """
    kept, all_units = set(keep), set(units)

    def visit(module: nn.Module, prefix: str) -> None:
        for name, child in list(module.named_children()):
            fqn = prefix + name
            if fqn in all_units:
                if fqn not in kept:
                    if isinstance(module, (nn.ModuleDict, nn.Sequential)):
                        del module._modules[name]
                    else:
                        setattr(module, name, None)
            elif any(u.startswith(fqn + ".") for u in all_units):
                visit(child, fqn + ".")

    visit(model, "")
    return model


def stage_boundaries(
    profile: ModelProfile, stages: Sequence[Sequence[str]], tp: int, tp_rank: int
) -> list[torch.Tensor]:
    """Meta tensors this rank's pipeline passes between stages, for one micro-batch.

    Args:
        profile: :func:`~gnnpar.parallel.profile.profile_model` of the whole model at
            one micro-batch, with the tensor-parallel plan in use.
        stages: Units of each stage.
        tp: Tensor-parallel degree.
        tp_rank: This rank's position in its tensor-parallel group: a stage output that
            tensor parallelism splits is sent as this rank's slice of its last dimension.

    Returns:
        ``pp`` meta tensors: each stage's output, as this rank sends it.
    """
    units = {u.name: u for u in profile.units}
    out = []
    for stage in stages:
        last = units[stage[-1]]
        assert last.output is not None, "profile the model before asking for its boundaries"
        shape = list(last.output.shape)
        if last.output_split and tp > 1:
            shape[-1] = shard_size(shape[-1], tp, tp_rank)
        out.append(torch.empty(shape, dtype=last.output.dtype, device="meta",
                               requires_grad=True))
    return out


def build_schedule(
    stage_module: nn.Module,
    stage_index: int,
    pp_mesh: DeviceMesh,
    config: ParallelConfig,
    loss_fn: LossFn,
    device: torch.device,
    boundaries: tuple[torch.Tensor, Sequence[torch.Tensor]] | None = None,
) -> PipelineScheduleSingle:
    """Wrap a stage in a ``PipelineStage`` and the configured schedule.

    Args:
        stage_module: This rank's stage (already tensor / data parallel if asked).
        stage_index: Position of this stage, ``pp_mesh.get_local_rank()``.
        pp_mesh: One-dimensional pipeline mesh.
        config: Degrees, schedule and micro-batch count.
        loss_fn: ``loss_fn(output, target)`` of one micro-batch, a mean over it.
        device: Device of the stage.
        boundaries: ``(micro_batch, stage_outputs)``: one micro-batch of model input and
            :func:`stage_boundaries`.  Given, the stage knows its input and output shapes
            up front; otherwise torch infers them with an extra forward on the first step
            and exchanges them between ranks.

    Returns:
        The schedule; call ``step(inputs)`` on the first stage, ``step(target=...,
        losses=[])`` on the last, ``step()`` on the others.
    """
    inputs = outputs = None
    if boundaries is not None:
        micro, stage_outputs = boundaries
        first = torch.empty_like(micro, device="meta")
        inputs = stage_outputs[stage_index - 1] if stage_index > 0 else first
        outputs = stage_outputs[stage_index]
    stage = PipelineStage(stage_module, stage_index, config.pp, device, input_args=inputs,
                          output_args=outputs, group=pp_mesh.get_group())
    cls = ScheduleGPipe if config.schedule == "gpipe" else Schedule1F1B
    return cls(stage, n_microbatches=config.microbatches, loss_fn=loss_fn)
