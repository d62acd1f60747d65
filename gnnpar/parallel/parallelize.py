"""Compose pipeline, tensor and data parallelism on one ``(pp, dp, tp)`` device mesh.

:func:`parallelize` applies, in torchtitan's order, to a model built identically on
every rank:

1. **pipeline** — keep only this rank's stage (``mesh["pp"]`` rank), in place;
2. **tensor** — shard the planned linear layers over ``mesh["tp"]`` (DTensor);
3. **data** — shard (FSDP2) or replicate (DDP) what is left over ``mesh["dp"]``;
4. **schedule** — wrap the stage in a GPipe / 1F1B schedule over ``mesh["pp"]``.

The result, a :class:`ParallelModel`, runs one training step with :meth:`ParallelModel.step`
on this rank's data-parallel slice of the batch, whatever the layout, and returns the
loss of the global batch on every rank.  Its parameters (DTensor shards) go to any
``torch.optim`` optimiser.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining.schedules import PipelineScheduleSingle
from torch.distributed.tensor import DTensor

from gnnpar.errors import ConfigError
from gnnpar.parallel.config import ParallelConfig
from gnnpar.parallel.data_parallel import apply_ddp, apply_fsdp
from gnnpar.parallel.pipeline_parallel import (
    LossFn,
    build_schedule,
    prune_to_stage,
    stage_boundaries,
    stage_units_of,
    units_or_empty,
)
from gnnpar.parallel.profile import profile_model
from gnnpar.parallel.tensor_parallel import (
    TensorParallelPlan,
    apply_tensor_parallel,
    check_plan,
    default_plan,
)
from gnnpar.parallel_dims import DNN_DIMS


class ParallelModel:
    """This rank's part of a parallelised model and how to train it.

    Built by :func:`parallelize`; not constructed directly.

    Attributes:
        module: This rank's stage with its original parameter names (tensor-parallel
            and FSDP parameters are DTensors).
        runner: What runs the stage: ``module`` itself, or its DDP wrapper.
        config: The degrees.
        mesh: The ``(pp, dp, tp)`` mesh.
        schedule: The pipeline schedule (``None`` when ``pp == 1``).
        loss_fn: Loss of one (micro-)batch, a mean over it.
    """

    def __init__(
        self,
        module: nn.Module,
        runner: nn.Module,
        config: ParallelConfig,
        mesh: DeviceMesh,
        schedule: PipelineScheduleSingle | None,
        loss_fn: LossFn | None,
    ) -> None:
        self.module = module
        self.runner = runner
        self.config = config
        self.mesh = mesh
        self.schedule = schedule
        self.loss_fn = loss_fn
        self.stage_index = mesh["pp"].get_local_rank()

    @property
    def is_first_stage(self) -> bool:
        """Whether this rank's stage takes the model inputs."""
        return self.stage_index == 0

    @property
    def is_last_stage(self) -> bool:
        """Whether this rank's stage produces the model outputs and the loss."""
        return self.stage_index == self.config.pp - 1

    def parameters(self) -> list[nn.Parameter]:
        """This rank's parameters (shards), for the optimiser."""
        return list(self.module.parameters())

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        """Forward of the whole model on this rank's batch (``pp == 1`` only)."""
        if self.schedule is not None:
            raise ConfigError(
                f"a pipelined model ({self.config.degrees()}) has no single forward.",
                field="pp",
                fix="train with .step(inputs, targets), or use pp=1.",
            )
        out: torch.Tensor = self.runner(inputs)
        return out

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Forward and backward of one batch; gradients end up in the parameters.

        Args:
            inputs: This data-parallel rank's inputs (see
                :func:`~gnnpar.parallel.data_parallel.shard_batch`); only the first
                pipeline stage reads them.
            targets: The matching targets; only the last stage reads them.

        Returns:
            The mean loss over the global batch (all data-parallel ranks), on every rank.

        Shapes:
            inputs ``[B / dp, *]``, targets ``[B / dp, *]``.
        """
        if self.loss_fn is None:
            raise ConfigError(
                "step() needs a loss function.",
                field="loss_fn",
                fix="pass loss_fn= to parallelize().",
            )
        if self.schedule is None:
            loss = self.loss_fn(self.runner(inputs), targets)
            loss.backward()  # type: ignore[no-untyped-call]
            local = loss.detach()
        else:
            micro = self.config.microbatches
            if inputs.shape[0] % micro != 0:
                raise ConfigError(
                    f"a local batch of {inputs.shape[0]} does not split into {micro} "
                    f"micro-batches ({self.config.degrees()}).",
                    field="batch_size",
                    fix=f"use a global batch divisible by dp * n_microbatches = "
                    f"{self.config.dp * micro}.",
                )
            local = self._pipeline_step(inputs, targets)
        return self._global_mean(local)

    def _pipeline_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        assert self.schedule is not None
        if self.is_first_stage:
            self.schedule.step(inputs)
        elif self.is_last_stage:
            losses: list[torch.Tensor] = []
            self.schedule.step(target=targets, losses=losses)
            return torch.stack([loss.detach() for loss in losses]).mean()
        else:
            self.schedule.step()
        return torch.zeros((), device=inputs.device)

    def _global_mean(self, local: torch.Tensor) -> torch.Tensor:
        out = local.detach().clone().float()
        for dim in ("pp", "dp"):  # sum the last stage's loss to all stages, average replicas
            if self.mesh[dim].size() > 1:
                dist.all_reduce(out, group=self.mesh[dim].get_group())
        return out / self.config.dp

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Unsharded parameters of this rank's stage, by single-device name.

        A collective over the ``tp`` and ``dp`` groups: every rank of the stage calls it.
        """
        return {
            name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
            for name, p in self.module.named_parameters()
        }


def _check_mesh(config: ParallelConfig, mesh: DeviceMesh) -> None:
    config.validate(mesh.size())
    shape = (config.pp, config.dp, config.tp)
    if tuple(mesh.mesh_dim_names or ()) != DNN_DIMS or tuple(mesh.shape) != shape:
        raise ConfigError(
            f"the mesh has dimensions {mesh.mesh_dim_names} of sizes {tuple(mesh.shape)} "
            f"but the config asks for {DNN_DIMS} = {shape} ({config.degrees()}).",
            field="mesh",
            fix="build the mesh with config.build_mesh().",
        )


def _check_stage_units(stages: list[list[str]], units: list[str], pp: int) -> None:
    if len(stages) != pp or [u for s in stages for u in s] != units or not all(stages):
        raise ConfigError(
            f"stage_units={stages} is not {pp} non-empty runs of the units {units}, in order.",
            field="stage_units",
            fix="give one list of consecutive unit names per stage, covering every unit once.",
        )


def _cut_to_stage(
    model: nn.Module,
    config: ParallelConfig,
    mesh: DeviceMesh,
    units: list[str],
    plan: TensorParallelPlan | None,
    stage_units: Sequence[Sequence[str]] | None,
    example_input: torch.Tensor | None,
) -> tuple[torch.Tensor, list[torch.Tensor]] | None:
    """Prune ``model`` to this rank's stage; return the stage shapes if they can be known."""
    if stage_units is None:
        stages = stage_units_of(model, config.pp)
    else:
        stages = [list(s) for s in stage_units]
        _check_stage_units(stages, units, config.pp)
    boundaries = None
    if example_input is not None:
        micro = example_input[: max(1, example_input.shape[0] // config.microbatches)]
        profile = profile_model(model, micro, units, plan if config.tp > 1 else None)
        outputs = stage_boundaries(profile, stages, config.tp, mesh["tp"].get_local_rank())
        boundaries = (micro, outputs)
    prune_to_stage(model, stages[mesh["pp"].get_local_rank()], units)
    return boundaries


def parallelize(
    model: nn.Module,
    config: ParallelConfig,
    mesh: DeviceMesh,
    *,
    loss_fn: LossFn | None = None,
    plan: TensorParallelPlan | None = None,
    stage_units: Sequence[Sequence[str]] | None = None,
    example_input: torch.Tensor | None = None,
) -> ParallelModel:
    """Make ``model`` pipeline, tensor and data parallel on ``mesh`` (in place).

    Args:
        model: The whole model, with the same initial weights on every rank; it is cut
            down to this rank's stage and its parameters replaced by shards.
        config: The degrees; ``config.world_size`` must equal the mesh size.
        mesh: The ``(pp, dp, tp)`` mesh of :meth:`ParallelConfig.build_mesh`.
        loss_fn: ``loss_fn(output, target)``, the mean loss of a (micro-)batch; needed
            by :meth:`ParallelModel.step` and by any pipeline.
        plan: Tensor-parallel plan; by default :func:`default_plan` (MLP, TransformerLM).
        stage_units: Units of each pipeline stage; by default a split balanced by
            parameter count (:func:`stage_units_of`).
        example_input: This rank's inputs of one step (shape and dtype only), for a
            pipeline to size its stage buffers up front; without it torch infers them
            on the first step with an extra forward and a metadata exchange.

    Returns:
        This rank's :class:`ParallelModel`.

    Raises:
        ConfigError: For a mesh that does not match ``config``, a plan naming missing
            modules, a pipeline without ``loss_fn`` or with more stages than units.
    """
    if config.pp > 1 and loss_fn is None:
        raise ConfigError(
            f"a pipeline ({config.degrees()}) computes the loss on its last stage and "
            "needs loss_fn.",
            field="loss_fn",
            fix="pass loss_fn=lambda output, target: ... (a mean over the micro-batch).",
        )
    _check_mesh(config, mesh)
    if config.tp > 1:
        plan = plan if plan is not None else default_plan(model, config.tp)
        check_plan(model, plan)
    units = units_or_empty(model)
    device = next(model.parameters()).device
    stage_index = mesh["pp"].get_local_rank()
    boundaries = None
    if config.pp > 1:
        boundaries = _cut_to_stage(model, config, mesh, units, plan, stage_units, example_input)
    if config.tp > 1 and plan:
        apply_tensor_parallel(model, mesh["tp"], plan)
    runner: nn.Module = model
    if config.dp > 1:
        if config.dp_mode == "fsdp":
            apply_fsdp(model, mesh["dp"], units, reshard_after_forward=config.pp == 1)
        else:
            runner = apply_ddp(model, mesh["dp"])
    schedule = None
    if config.pp > 1:
        assert loss_fn is not None
        schedule = build_schedule(runner, stage_index, mesh["pp"], config, loss_fn, device,
                                  boundaries)
    return ParallelModel(model, runner, config, mesh, schedule, loss_fn)
