"""Every process group of a run, built once from degrees and handed out by name.

torchtitan's ``ParallelDims`` shape: a run describes its parallelism by degrees, one
:class:`ParallelDims` builds the groups those degrees need, and whatever uses a group asks
for it by name (:meth:`ParallelDims.get_group`) instead of creating its own.  Building is
collective: every rank creates the same groups in the same order (NCCL's rule; each group
is one NCCL communicator on GPUs).  Two places build process groups: the context's own
(:func:`gnnpar.distributed.init`) and this one.

=============== ================================================== =======================
name            what runs on it                                    built
=============== ================================================== =======================
``data``        DDP's gradient all-reduce, halo and feature        always: the context's
                exchanges, sampling, evaluation sums, checkpoints  group
``local``       local SGD's group averages (``--sync-groups G:h``) ``local=G``
``x y z``       the 3D layers' collectives, one group per axis     ``grid=(X, Y, Z)``
                (mesh ``grid``)                                    (``--grid X,Y,Z``)
``pp dp tp``    the DNN toolkit's pipeline, data and tensor        ``dnn=(pp, dp, tp)``
                parallel groups (mesh ``dnn``)                     (:class:`ParallelConfig`)
=============== ================================================== =======================

Example::

    dims = ParallelDims(ctx, local=2)          # collective
    dims.get_group("local")                    # this rank's group of 2 ranks
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError

GRID_DIMS = ("x", "y", "z")
"""The 3D grid's axes (:mod:`gnnpar.nn.grid`): rank ``r`` sits at ``(r // (Y Z), r // Z mod
Y, r mod Z)``."""
DNN_DIMS = ("pp", "dp", "tp")
"""The DNN toolkit's mesh dimensions, outermost first (tensor parallelism innermost)."""


def check_grid(dims: tuple[int, int, int], world_size: int) -> None:
    """Raise :class:`ConfigError` unless ``X * Y * Z == world_size``, listing grids that fit."""
    if math.prod(dims) != world_size:
        fits = [f"{a},{b},{world_size // (a * b)}" for a in range(1, world_size + 1)
                for b in range(1, world_size + 1) if world_size % (a * b) == 0]
        raise ConfigError(
            f"grid {','.join(map(str, dims))} has {math.prod(dims)} ranks, the run has "
            f"{world_size}.", field="full.grid",
            fix=f"pass --grid X,Y,Z with X*Y*Z = {world_size}: one of {' '.join(fits)}.")


@dataclass
class ParallelDims:
    """The process groups that the given degrees need (see the module docstring).

    Args:
        ctx: The run's distributed context (``ctx.group``: the ``data`` group).
        local: Ranks per local SGD group (0: none).
        grid: The 3D grid's ``(X, Y, Z)``, or ``None``.
        dnn: The DNN toolkit's ``(pp, dp, tp)``, or ``None``.

    Raises:
        ConfigError: A degree that does not tile the ranks (on every rank, before any
            group).
    """

    ctx: DistContext
    local: int = 0
    grid: tuple[int, int, int] | None = None
    dnn: tuple[int, int, int] | None = None
    _groups: dict[str, dist.ProcessGroup | None] = field(init=False, repr=False)
    _meshes: dict[str, DeviceMesh] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        ctx = self.ctx
        if self.local and ctx.world_size % self.local:
            raise ConfigError(f"groups of {self.local} ranks do not tile {ctx.world_size} "
                              "ranks.", field="train.sync_groups",
                              fix="pass a group size that divides the number of processes.")
        if self.grid is not None:
            check_grid(self.grid, ctx.world_size)
        self._groups = {"data": ctx.group}
        self._meshes = {}
        if self.local:
            self._groups["local"] = dist.new_subgroups(  # type: ignore[no-untyped-call]
                group_size=self.local, group=ctx.group)[0]
        if self.grid is not None:
            ranks = torch.tensor(dist.get_process_group_ranks(ctx.group)
                                 if ctx.group is not None else list(range(ctx.world_size)))
            self._add_mesh("grid", DeviceMesh(ctx.device.type, ranks.view(*self.grid),
                                              mesh_dim_names=GRID_DIMS))
        if self.dnn is not None:
            self._add_mesh("dnn", init_device_mesh(ctx.device.type, self.dnn,
                                                   mesh_dim_names=DNN_DIMS))

    def _add_mesh(self, name: str, mesh: DeviceMesh) -> None:
        self._meshes[name] = mesh
        names = mesh.mesh_dim_names or ()
        self._groups.update({dim: mesh.get_group(dim) for dim in names})

    def get_group(self, name: str) -> dist.ProcessGroup | None:
        """The group called ``name`` (``None`` for ``data`` on the default group).

        Raises:
            KeyError: No such group was built.
        """
        if name not in self._groups:
            raise KeyError(f"no {name!r} group: built {sorted(self._groups)}")
        return self._groups[name]

    def get_mesh(self, name: str) -> DeviceMesh:
        """The device mesh called ``name`` (``grid`` or ``dnn``).

        Raises:
            KeyError: No such mesh was built.
        """
        if name not in self._meshes:
            raise KeyError(f"no {name!r} mesh: built {sorted(self._meshes)}")
        return self._meshes[name]
