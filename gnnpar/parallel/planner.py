"""Choose a ``dp x tp x pp`` layout: estimate each one's memory and time, keep what fits.

:func:`estimate` costs one layout from a meta-device :class:`~gnnpar.parallel.profile.ModelProfile`:

- **parameters** per rank, exactly: each parameter of the rank's stage, split by the
  tensor-parallel plan (``torch.chunk`` sizes, as DTensor ``Shard``) and then by FSDP2
  along dimension 0 (again ``torch.chunk`` sizes);
- **gradients** as parameters, **optimiser state** as ``optimizer_states`` times them;
- **activations**: saved bytes of the stage at one micro-batch, split ones over ``tp``,
  times the micro-batches in flight (1 without a pipeline, all of them for GPipe,
  ``pp - stage`` for 1F1B);
- **transient** bytes: FSDP2's gathered parameters and unreduced gradients (one unit
  at a time without a pipeline; the whole stage with one, where gathered parameters
  are kept across micro-batches);
- **communication** per step, bytes sent per rank with the ring factors of
  :func:`gnnpar.comm.ring_bytes` (as :mod:`gnnpar.parallel.measure` counts them): FSDP
  all-gathers and reduce-scatter (or the DDP all-reduce), tensor-parallel all-reduces
  and all-gathers, pipeline sends, the two scalar loss all-reduces;
- **step time** = ``compute * (n_micro + pp - 1) / n_micro + bytes / bandwidth`` with a
  :class:`~gnnpar.cost.HardwareModel` (matmul FLOPs only, no overlap: a ranking, not a
  forecast).

:func:`plan` estimates every layout of a world size, rejects those that exceed the memory
budget or cannot run (a tensor-parallel degree that does not divide the heads, more
stages than units, a batch that does not split), and proposes the fastest of the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from gnnpar.comm import ring_bytes
from gnnpar.cost import DEFAULT_HARDWARE, HardwareModel, choose
from gnnpar.errors import ConfigError
from gnnpar.parallel.config import ParallelConfig
from gnnpar.parallel.pipeline_parallel import stage_units_of, units_or_empty
from gnnpar.parallel.profile import ModelProfile, ParamInfo, UnitProfile, profile_model
from gnnpar.parallel.tensor_parallel import TensorParallelPlan, default_plan, shard_size


@dataclass
class LayoutEstimate:
    """Estimated cost of one layout (per rank, per step; maxima over ranks).

    Attributes:
        config: The layout.
        param_bytes: Parameter bytes of each rank, in mesh rank order
            (``rank = (stage * dp + dp_rank) * tp + tp_rank``).
        optimizer_bytes: Largest optimiser state of a rank.
        activation_bytes: Largest saved activations of a rank.
        transient_bytes: Largest FSDP gathered parameters and gradients of a rank.
        peak_bytes: Largest total (parameters, gradients, optimiser, activations,
            transient) of a rank.
        comm_bytes: Largest bytes sent by a rank in one step.
        comm_by_kind: Bytes sent per collective kind by the rank with most traffic.
        step_time_s: Modelled step time.
    """

    config: ParallelConfig
    param_bytes: list[int]
    optimizer_bytes: int
    activation_bytes: int
    transient_bytes: int
    peak_bytes: int
    comm_bytes: int
    comm_by_kind: dict[str, int]
    step_time_s: float


@dataclass(frozen=True)
class Rejection:
    """A layout :func:`plan` did not propose, and why.

    Attributes:
        config: The layout.
        reason: What rules it out (the budget it exceeds, or the configuration error).
        estimate: Its estimate, when it could be costed.
    """

    config: ParallelConfig
    reason: str
    estimate: LayoutEstimate | None = None


@dataclass
class Plan:
    """Result of :func:`plan`.

    Attributes:
        best: The fastest layout that fits.
        feasible: Every layout that fits, fastest first.
        rejected: Every other layout and why.
    """

    best: LayoutEstimate
    feasible: list[LayoutEstimate]
    rejected: list[Rejection] = field(default_factory=list)


def _tp_shape(p: ParamInfo, tp: int, t: int) -> list[int]:
    """Shape of tensor-parallel rank ``t``'s slice of ``p``."""
    shape = list(p.shape)
    if tp > 1 and p.tp_dim is not None:
        shape[p.tp_dim] = shard_size(shape[p.tp_dim], tp, t)
    return shape


def _numel(shape: Sequence[int]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def _rank_bytes(params: Sequence[ParamInfo], config: ParallelConfig, t: int, d: int) -> int:
    """Parameter bytes held by tensor-parallel rank ``t``, data-parallel rank ``d``."""
    total = 0
    for p in params:
        shape = _tp_shape(p, config.tp, t)
        if config.dp > 1 and config.dp_mode == "fsdp" and shape:
            shape[0] = shard_size(shape[0], config.dp, d)
        total += _numel(shape) * p.element_size
    return total


def _boundary_bytes(unit: UnitProfile, tp: int) -> float:
    """Bytes a stage ending with ``unit`` sends per step share: its output, or a slice."""
    return unit.output_bytes / tp if unit.output_split else unit.output_bytes


def _data_parallel_traffic(
    params: Sequence[ParamInfo], config: ParallelConfig, t: int, unit_names: set[str]
) -> dict[str, float]:
    """Bytes sent per step by FSDP2 (padded to ``dp`` rows) or DDP on tp rank ``t``."""
    dp = config.dp
    if dp == 1:
        return {}
    if config.dp_mode == "ddp":
        full = sum(_numel(_tp_shape(p, config.tp, t)) * p.element_size for p in params)
        return {"all_reduce": ring_bytes(full, dp, "all_reduce")}
    gathered = scattered = 0
    for p in params:
        shape = _tp_shape(p, config.tp, t)
        if not shape:
            continue
        padded = -(-shape[0] // dp) * dp * _numel(shape[1:]) * p.element_size
        # Units are gathered in forward and again in backward; the root, and every unit
        # under a pipeline (kept gathered across micro-batches), once.
        gathered += padded * (2 if config.pp == 1 and p.unit in unit_names else 1)
        scattered += padded
    return {"all_gather": ring_bytes(gathered, dp, "all_gather"),
            "reduce_scatter": ring_bytes(scattered, dp, "reduce_scatter")}


def estimate(
    profile: ModelProfile,
    config: ParallelConfig,
    stages: Sequence[Sequence[str]],
    *,
    optimizer_states: int = 2,
    hardware: HardwareModel = DEFAULT_HARDWARE,
) -> LayoutEstimate:
    """Cost one layout.

    Args:
        profile: The model's profile at the global batch (:func:`profile_model`).
        config: The layout.
        stages: Units of each pipeline stage (one list when ``pp == 1``).
        optimizer_states: Per-element optimiser tensors per parameter (Adam: 2).
        hardware: Throughputs for the step-time model.

    Returns:
        The estimate.
    """
    dp, tp, pp, micro = config.dp, config.tp, config.pp, config.microbatches
    units = {u.name: u for u in profile.units}
    scale = 1 / dp  # share of the global batch a rank processes per step
    param_bytes = [0] * config.world_size
    totals, acts, transients, traffic = [], [], [], []
    stage_times = []
    for s, stage in enumerate(stages):
        mine = set(stage)
        params = [p for p in profile.params if p.unit in mine or p.unit not in units]
        inflight = 1 if pp == 1 else (micro if config.schedule == "gpipe" else min(pp - s, micro))
        per_micro = sum(units[u].saved + units[u].tp_saved / tp for u in stage) * scale / micro
        act = int(per_micro * inflight)
        flops = sum(units[u].flops + units[u].tp_flops / tp for u in stage) * scale
        stage_times.append(hardware.seconds(3 * flops / micro))
        shared: dict[str, float] = {}
        for u in stage:
            for kind, nbytes in units[u].tp_collectives:
                shared[kind] = shared.get(kind, 0.0) + ring_bytes(nbytes * scale, tp, kind)
        sends = (_boundary_bytes(units[stage[-1]], tp) if s < pp - 1 else 0) + (
            _boundary_bytes(units[stages[s - 1][-1]], tp) if s > 0 else 0)
        if sends:
            shared["send"] = sends * scale
        loss = ring_bytes(4, pp, "all_reduce") + ring_bytes(4, dp, "all_reduce")
        if loss:
            shared["all_reduce"] = shared.get("all_reduce", 0.0) + loss
        for t in range(tp):
            tp_local = [sum(_numel(_tp_shape(p, tp, t)) * p.element_size
                            for p in params if p.unit == u) for u in (*stage, "")]
            transient = 0
            if dp > 1 and config.dp_mode == "fsdp":
                transient = 2 * (sum(tp_local) if pp > 1 else max(tp_local))
            kinds = dict(shared)
            wrapped = set(units) - {""}
            for kind, amount in _data_parallel_traffic(params, config, t, wrapped).items():
                kinds[kind] = kinds.get(kind, 0.0) + amount
            for d in range(dp):
                local = _rank_bytes(params, config, t, d)
                param_bytes[(s * dp + d) * tp + t] = local
                totals.append(local * (2 + optimizer_states) + act + transient)
            acts.append(act)
            transients.append(transient)
            traffic.append(kinds)
    sent = [sum(k.values()) for k in traffic]
    worst = max(range(len(sent)), key=sent.__getitem__)
    compute = max(stage_times) * (micro + pp - 1)
    return LayoutEstimate(
        config=config,
        param_bytes=param_bytes,
        optimizer_bytes=max(param_bytes) * optimizer_states,
        activation_bytes=max(acts),
        transient_bytes=max(transients),
        peak_bytes=int(max(totals)),
        comm_bytes=int(sent[worst]),
        comm_by_kind={k: int(v) for k, v in sorted(traffic[worst].items()) if v},
        step_time_s=compute + hardware.seconds(0.0, sent[worst]),
    )


def plan(
    model: nn.Module,
    world_size: int,
    memory_budget: int,
    example_input: torch.Tensor,
    *,
    tp_plan: TensorParallelPlan | None = None,
    layouts: Sequence[ParallelConfig] | None = None,
    optimizer_states: int = 2,
    hardware: HardwareModel = DEFAULT_HARDWARE,
) -> Plan:
    """Propose the fastest layout of ``world_size`` ranks that fits ``memory_budget``.

    Args:
        model: The whole model (not modified; profiled on the meta device).
        world_size: Number of ranks.
        memory_budget: Bytes one rank may hold (parameters, gradients, optimiser state,
            activations, FSDP buffers).
        example_input: One global batch, batch dimension first (only its shape and dtype
            are used).
        tp_plan: Tensor-parallel plan; by default :func:`default_plan` for each ``tp``.
        layouts: Layouts to consider; by default every ``ParallelConfig.layouts(world_size)``.
        optimizer_states: Per-element optimiser tensors per parameter (Adam: 2, SGD: 0).
        hardware: Throughputs for the step-time model.

    Returns:
        The proposal, the other feasible layouts, and the rejected ones with reasons.

    Raises:
        ConfigError: If no layout fits, listing why each was rejected.
    """
    units = units_or_empty(model)
    batch = int(example_input.shape[0])
    layouts = list(layouts) if layouts is not None else ParallelConfig.layouts(world_size)
    rejected: list[Rejection] = []
    runnable: list[tuple[ParallelConfig, list[list[str]]]] = []
    profile_plan = tp_plan
    for config in layouts:
        try:
            config.validate(world_size, batch)
            if config.tp > 1:
                this_plan = tp_plan if tp_plan is not None else default_plan(model, config.tp)
                profile_plan = profile_plan if profile_plan is not None else this_plan
            stages = stage_units_of(model, config.pp) if config.pp > 1 else [units or [""]]
        except ConfigError as exc:
            rejected.append(Rejection(config, str(exc)))
            continue
        runnable.append((config, stages))
    profile = profile_model(model, example_input, units, profile_plan)
    feasible = []
    for config, stages in runnable:
        est = estimate(profile, config, stages, optimizer_states=optimizer_states,
                       hardware=hardware)
        if est.peak_bytes > memory_budget:
            rejected.append(Rejection(
                config, f"needs {est.peak_bytes} bytes per rank, over the budget of "
                f"{memory_budget}", est))
        else:
            feasible.append(est)
    if not feasible:
        reasons = "; ".join(f"({r.config.degrees()}) {r.reason}" for r in rejected)
        raise ConfigError(
            f"no layout of {world_size} ranks fits a budget of {memory_budget} bytes per "
            f"rank: {reasons}.",
            field="memory_budget",
            fix="raise the budget, use more ranks, or a smaller batch or model.",
        )
    feasible.sort(key=lambda e: e.step_time_s)
    best, _ = choose(feasible, lambda e: e.step_time_s, lambda e: e.comm_bytes,
                     margin=0.0)  # the fastest (ties: fewer bytes)
    return Plan(best, feasible, rejected)
