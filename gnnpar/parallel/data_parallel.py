"""Data parallelism over the ``dp`` mesh dimension: FSDP2 (default) or DDP.

FSDP2 (:func:`torch.distributed.fsdp.fully_shard`) keeps ``1/dp`` of every parameter,
gradient and optimiser state per rank and all-gathers one unit (a transformer block, a
linear layer) just before it runs; gradients are reduce-scattered.  It runs on gloo CPU
process groups as well as NCCL, composes with tensor parallelism (DTensor parameters on
the ``tp`` mesh are sharded again on ``dp``), and with pipelining (the schedule tells it
which micro-batch is the last, so gradients are reduced once per step).  DDP
(:class:`~torch.nn.parallel.DistributedDataParallel`) replicates everything and
all-reduces gradients; it is there for models FSDP cannot wrap and for comparison, and
takes no DTensor parameters (``tp == 1``).

:func:`shard_batch` gives each data-parallel rank its slice of a global batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

from gnnpar.errors import ConfigError


def apply_fsdp(
    module: nn.Module,
    dp_mesh: DeviceMesh,
    units: Sequence[str],
    *,
    reshard_after_forward: bool = True,
) -> nn.Module:
    """Shard ``module`` with FSDP2 over ``dp_mesh``, one communication unit per name.

    Each named unit that ``module`` holds and that has parameters becomes its own FSDP
    group (all-gathered just before it runs, freed after); the root collects the rest.

    Args:
        module: The model or this rank's pipeline stage (modified in place).
        dp_mesh: One-dimensional data-parallel mesh.
        units: Submodule names to wrap separately (e.g. transformer blocks); names the
            module does not hold are skipped.
        reshard_after_forward: Free the gathered parameters after each unit's forward
            (gathering them again in backward).  ``False`` keeps them until backward,
            which saves one all-gather per micro-batch under pipelining.

    Returns:
        ``module``, now an ``FSDPModule``.
    """
    present = dict(module.named_modules())
    for name in units:
        sub = present.get(name)
        if sub is not None and any(True for _ in sub.parameters()):
            fully_shard(sub, mesh=dp_mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(module, mesh=dp_mesh, reshard_after_forward=reshard_after_forward)
    return module


def apply_ddp(module: nn.Module, dp_mesh: DeviceMesh) -> DistributedDataParallel:
    """Replicate ``module`` over ``dp_mesh`` with DDP (gradients all-reduced).

    Args:
        module: A module without DTensor parameters (``tp == 1``).
        dp_mesh: One-dimensional data-parallel mesh.

    Returns:
        The DDP wrapper; its ``.module`` is ``module``.
    """
    return DistributedDataParallel(module, process_group=dp_mesh.get_group())


def shard_batch(batch: torch.Tensor, dp_mesh: DeviceMesh) -> torch.Tensor:
    """This data-parallel rank's contiguous slice of a global batch (a view).

    Args:
        batch: The global batch, batch dimension first.
        dp_mesh: One-dimensional data-parallel mesh.

    Returns:
        Rows ``rank * B / dp`` to ``(rank + 1) * B / dp``.

    Raises:
        ConfigError: If the batch size is not divisible by the ``dp`` degree.

    Shapes:
        batch ``[B, *]``, returns ``[B / dp, *]``.
    """
    dp = dp_mesh.size()
    if batch.shape[0] % dp != 0:
        raise ConfigError(
            f"a batch of {batch.shape[0]} rows does not split into dp={dp} equal parts.",
            field="batch_size",
            fix=f"use a global batch size divisible by {dp}.",
        )
    return batch.chunk(dp)[dp_mesh.get_local_rank()]
