"""Every process group of a run, built once, in one order, and passed explicitly.

torchtitan's ``ParallelDims`` shape: the trainer builds one :class:`ParallelDims` from the
configuration before any engine exists, and every engine takes the groups it uses from
it instead of creating its own.  Building is collective: every rank creates the same
groups in the same order (NCCL's rule; each group is one NCCL communicator on GPUs).

=============== ================================================== =====================
group           what runs on it                                    built
=============== ================================================== =====================
``data``        DDP's gradient all-reduce, halo and feature        always: the run's
                exchanges, sampling, evaluation sums, checkpoints  context's group
``local``       local SGD's group averages (``--sync-groups G:h``) with ``--sync-groups``
``grid`` axes   the 3D layers' collectives, one group per axis     with ``--grid X,Y,Z``
=============== ================================================== =====================
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from gnnpar.comm import CommStats
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.nn.grid import ProcessGrid, parse_grid
from gnnpar.train.config import Config
from gnnpar.train.sync import LocalSGD


@dataclass(frozen=True)
class ParallelDims:
    """The process groups of one run (see the module docstring).

    Attributes:
        ctx: The run's distributed context (``ctx.group``: the data group).
        sync: When the steps synchronise (local SGD's schedule).
        local: This rank's group of ``G`` consecutive ranks for local SGD's group
            averages, or ``None`` (no ``--sync-groups``).
        grid: The 3D process grid (one group per axis), or ``None`` (no ``--grid``).
    """

    ctx: DistContext
    sync: LocalSGD
    local: dist.ProcessGroup | None = None
    grid: ProcessGrid | None = None

    @property
    def data(self) -> dist.ProcessGroup | None:
        """The group of all the run's ranks (``None``: the default group)."""
        return self.ctx.group

    @classmethod
    def build(cls, cfg: Config, ctx: DistContext, stats: CommStats | None = None
              ) -> ParallelDims:
        """The groups ``cfg`` needs on ``ctx``'s ranks (collective).

        ``stats`` counts the grid layers' bytes.

        Raises:
            ConfigError: ``--sync-groups`` does not tile the ranks, or the grid's
                ``X * Y * Z`` is not the world size (on every rank, before any group).
        """
        sync = cfg.train.local_sgd()
        local: dist.ProcessGroup | None = None
        if sync.group_size:
            if ctx.world_size % sync.group_size:
                raise ConfigError(f"groups of {sync.group_size} ranks do not tile "
                                  f"{ctx.world_size} ranks.", field="train.sync_groups",
                                  fix="pass a group size that divides the number of "
                                  "processes.")
            local = dist.new_subgroups(  # type: ignore[no-untyped-call]
                group_size=sync.group_size, group=ctx.group)[0]
        grid = None
        if cfg.train.mode == "full" and cfg.full.grid is not None:
            grid = ProcessGrid.build(ctx, parse_grid(cfg.full.grid), cfg.model.layers, stats)
        return cls(ctx, sync, local, grid)
