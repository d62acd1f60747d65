"""Parallelism degrees of a run and the named device mesh they describe.

:class:`ParallelConfig` holds the three degrees (data ``dp``, tensor ``tp``, pipeline
``pp``) and how each is run (FSDP2 or DDP for data parallelism, GPipe or 1F1B for the
pipeline, the number of micro-batches).  It is checked once, in one place, against the
world size and the batch size, and every error names every degree, so one message is
enough to fix a launch command.  :meth:`ParallelConfig.build_mesh` turns it into one
:class:`~torch.distributed.device_mesh.DeviceMesh` of shape ``(pp, dp, tp)`` with the
dimension names ``("pp", "dp", "tp")``: ``mesh["tp"]`` is this rank's tensor-parallel
group, ``mesh["dp"]`` its data-parallel group, ``mesh["pp"]`` its pipeline.  Tensor
parallelism is the innermost dimension, so a tensor-parallel group is a set of adjacent
ranks (on GPUs: the GPUs of one machine, on the fastest links).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from torch.distributed.device_mesh import DeviceMesh

from gnnpar.distributed import default_group_context
from gnnpar.errors import ConfigError
from gnnpar.parallel_dims import ParallelDims

DataParallelMode = Literal["fsdp", "ddp"]
"""How the ``dp`` dimension runs: ``"fsdp"`` shards parameters, gradients and optimiser
state with FSDP2 ``fully_shard``; ``"ddp"`` replicates them with ``DistributedDataParallel``
(tensor parallelism needs ``"fsdp"``)."""

PipelineScheduleName = Literal["gpipe", "1f1b"]
"""Pipeline schedule: ``"gpipe"`` (all forwards, then all backwards) or ``"1f1b"`` (one
forward one backward in steady state, which holds at most ``pp`` micro-batches of
activations per stage instead of all of them)."""


@dataclass(frozen=True)
class ParallelConfig:
    """Data, tensor and pipeline parallel degrees and how each is run.

    Attributes:
        dp: Data-parallel degree: replicas (or FSDP shards) that each see a different
            part of the batch.
        tp: Tensor-parallel degree: ranks that split every planned linear layer.
        pp: Pipeline-parallel degree: stages the model is cut into.
        dp_mode: ``"fsdp"`` (FSDP2, default) or ``"ddp"`` for the ``dp`` dimension.
        schedule: ``"1f1b"`` (default) or ``"gpipe"`` pipeline schedule.
        n_microbatches: Micro-batches per step when ``pp > 1``; ``None`` means ``pp``.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    dp_mode: DataParallelMode = "fsdp"
    schedule: PipelineScheduleName = "1f1b"
    n_microbatches: int | None = None

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(
                    f"{name}={value!r} must be a positive integer ({self.degrees()}).",
                    field=name,
                    fix=f"pass {name}=1 to switch that kind of parallelism off.",
                )
        if self.dp_mode not in ("fsdp", "ddp"):
            raise ConfigError(
                f"dp_mode={self.dp_mode!r} is not a data-parallel mode.",
                field="dp_mode",
                fix='use dp_mode="fsdp" (sharded) or dp_mode="ddp" (replicated).',
            )
        if self.schedule not in ("gpipe", "1f1b"):
            raise ConfigError(
                f"schedule={self.schedule!r} is not a pipeline schedule.",
                field="schedule",
                fix='use schedule="1f1b" or schedule="gpipe".',
            )
        if self.n_microbatches is not None and (
            not isinstance(self.n_microbatches, int) or self.n_microbatches < 1
        ):
            raise ConfigError(
                f"n_microbatches={self.n_microbatches!r} must be a positive integer.",
                field="n_microbatches",
                fix="pass n_microbatches=None to use one micro-batch per stage.",
            )
        if self.schedule == "1f1b" and self.pp > 1 and self.microbatches < self.pp:
            raise ConfigError(
                f"the 1F1B schedule needs at least pp={self.pp} micro-batches, got "
                f"n_microbatches={self.n_microbatches} ({self.degrees()}).",
                field="n_microbatches",
                fix=f'use n_microbatches >= {self.pp}, or schedule="gpipe".',
            )
        if self.dp_mode == "ddp" and self.tp > 1 and self.dp > 1:
            raise ConfigError(
                f"dp_mode='ddp' cannot replicate tensor-parallel (DTensor) parameters "
                f"({self.degrees()}).",
                field="dp_mode",
                fix='use dp_mode="fsdp" with tp > 1, or tp=1 with DDP.',
            )

    @property
    def world_size(self) -> int:
        """Number of ranks this configuration needs, ``dp * tp * pp``."""
        return self.dp * self.tp * self.pp

    @property
    def microbatches(self) -> int:
        """Micro-batches per step: 1 without a pipeline, else ``n_microbatches or pp``."""
        if self.pp == 1:
            return 1
        return self.n_microbatches if self.n_microbatches is not None else self.pp

    def degrees(self) -> str:
        """The degrees as text, e.g. ``"dp=2, tp=2, pp=1"``, for messages and logs."""
        return f"dp={self.dp}, tp={self.tp}, pp={self.pp}"

    def validate(self, world_size: int, batch_size: int | None = None) -> None:
        """Check that the degrees fit ``world_size`` ranks and a global batch.

        Args:
            world_size: Number of processes started.
            batch_size: Global batch size (rows, or sequences), if known.

        Raises:
            ConfigError: If ``dp * tp * pp != world_size``, or the batch does not split
                into ``dp`` equal parts of ``microbatches`` equal micro-batches.
        """
        if self.world_size != world_size:
            raise ConfigError(
                f"dp * tp * pp = {self.dp} * {self.tp} * {self.pp} = {self.world_size} "
                f"but the world size is {world_size} ({self.degrees()}).",
                field="dp*tp*pp",
                fix=f"choose degrees whose product is {world_size}, e.g. "
                f"{_example_layouts(world_size)}, or start {self.world_size} processes.",
            )
        if batch_size is not None:
            parts = self.dp * self.microbatches
            if batch_size % parts != 0:
                raise ConfigError(
                    f"batch_size={batch_size} does not split into dp={self.dp} replicas of "
                    f"{self.microbatches} micro-batches ({self.degrees()}).",
                    field="batch_size",
                    fix=f"use a batch size divisible by dp * microbatches = {parts}.",
                )

    def build_mesh(self, device_type: str = "cpu") -> DeviceMesh:
        """Create the ``(pp, dp, tp)`` device mesh; a collective over the default group.

        The mesh is :class:`~gnnpar.parallel_dims.ParallelDims`'s ``dnn`` mesh: its groups
        are ``pp``, ``dp`` and ``tp``.

        Every rank must call this, in the same order as every other mesh it builds.

        Args:
            device_type: ``"cpu"`` (gloo) or ``"cuda"`` (NCCL).

        Returns:
            The mesh with dimension names ``("pp", "dp", "tp")``.
        """
        dims = ParallelDims(default_group_context(device_type), dnn=(self.pp, self.dp, self.tp))
        return dims.get_mesh("dnn")

    @staticmethod
    def layouts(world_size: int, **options: object) -> list[ParallelConfig]:
        """Every ``(dp, tp, pp)`` whose product is ``world_size``, data parallel first.

        Args:
            world_size: Number of ranks.
            **options: Other fields (``dp_mode``, ``schedule``, ``n_microbatches``) given
                to every layout.

        Returns:
            The layouts, ordered by decreasing ``dp`` then decreasing ``tp`` (without the
            tensor-parallel ones that DDP cannot run when ``dp_mode="ddp"``).
        """
        if world_size < 1:
            raise ConfigError(
                f"world_size={world_size} must be positive.",
                field="world_size",
                fix="pass the number of processes.",
            )
        base = ParallelConfig(**options)  # type: ignore[arg-type]
        out = []
        for dp in (d for d in range(world_size, 0, -1) if world_size % d == 0):
            rest = world_size // dp
            for tp in (t for t in range(rest, 0, -1) if rest % t == 0):
                if base.dp_mode == "ddp" and tp > 1 and dp > 1:
                    continue
                out.append(replace(base, dp=dp, tp=tp, pp=rest // tp))
        return out


def _example_layouts(world_size: int) -> str:
    return ", ".join(
        f"(dp={c.dp}, tp={c.tp}, pp={c.pp})" for c in ParallelConfig.layouts(world_size)[:3]
    )
