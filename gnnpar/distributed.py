"""Process-group setup: one process per GPU (or per CPU slot), launched by ``torchrun``.

:func:`init` reads the torchrun environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``), picks NCCL for CUDA tensors and gloo for CPU tensors,
sets a collective timeout so that a dead peer raises instead of hanging, and returns a
:class:`DistContext` that every communicating function takes explicitly.  Without a
torchrun environment it starts a one-process group, so the same code runs unchanged on a
laptop.

The runtime maps **one partition to one rank**: a partition directory of ``K`` parts is
trained with exactly ``K`` processes (:func:`check_world_matches_parts`).  Re-partitioning
is cheap (METIS of a 1M-node graph takes seconds), and one part per rank keeps every
buffer and counter per rank unambiguous.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass, replace
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore

from gnnpar.errors import ConfigError, DistributedError

DEFAULT_TIMEOUT = timedelta(seconds=300)
"""Collective timeout unless ``init`` is given another (``gnnpar-train --timeout-s``)."""


@dataclass(frozen=True)
class DistContext:
    """Who this process is and how it talks to its peers.

    Attributes:
        rank: Rank of this process in ``group``.
        world_size: Number of processes in ``group``.
        local_rank: Rank on this machine (selects the GPU).
        device: Device that holds this rank's model and batches.
        backend: Backend string given to ``init_process_group``.
        group: Process group of all ranks (``None`` means the default group).
        timeout: Collective timeout; a peer silent for longer makes collectives raise.

    Example::

        ctx = gnnpar.init()
        if ctx.is_main:
            print(ctx.world_size, ctx.device, ctx.backend)
    """

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    group: dist.ProcessGroup | None = None
    timeout: timedelta = DEFAULT_TIMEOUT

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the rank that logs and writes records."""
        return self.rank == 0


def _pick_device(local_rank: int, device: str | torch.device | None) -> torch.device:
    if device is not None:
        dev = torch.device(device)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def init(
    device: str | torch.device | None = None,
    timeout: timedelta = DEFAULT_TIMEOUT,
) -> DistContext:
    """Join (or start) the process group described by the torchrun environment.

    Args:
        device: ``"cpu"``, ``"cuda"`` or a specific device; by default the GPU of
            ``LOCAL_RANK`` when CUDA is available, else the CPU.
        timeout: Collective timeout after which a rank waiting on a dead peer raises.

    Returns:
        The context to pass to every communicating function.

    Example::

        ctx = gnnpar.init()              # under torchrun, or a world of one
        ...                              # pass ctx to every communicating call
        gnnpar.shutdown()
    """
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    dev = _pick_device(local_rank, device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        backend = "cpu:gloo,cuda:nccl"
    else:
        backend = "gloo"
    if not dist.is_initialized():
        if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
            dist.init_process_group(
                backend, rank=rank, world_size=world_size, timeout=timeout,
                device_id=dev if dev.type == "cuda" else None,
            )
        elif world_size == 1:
            dist.init_process_group(
                backend, store=HashStore(), rank=0, world_size=1, timeout=timeout
            )
        else:
            raise DistributedError(
                f"WORLD_SIZE={world_size} but MASTER_ADDR/MASTER_PORT are not set.",
                field="environment",
                fix="launch with `torchrun --nproc-per-node N ...` or `gnnpar-train --nproc N`.",
            )
    return DistContext(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        device=dev,
        backend=backend,
        timeout=timeout,
    )


def new_group(ctx: DistContext) -> DistContext:
    """The same ranks on a fresh process group (collective: every rank calls it).

    Collectives on one group must be issued in the same order on every rank, so work that
    communicates from a second thread (the loader's prefetch) needs a group of its own.

    Returns:
        A copy of ``ctx`` whose :attr:`DistContext.group` is the new group.
    """
    group = dist.new_group(list(range(ctx.world_size)), timeout=ctx.timeout,
                           backend=ctx.backend)
    return replace(ctx, group=group)


def shutdown(wait: bool = True) -> None:
    """Leave the process group (a no-op when none was started).

    With ``wait`` (a run that ended well; collective) every rank first waits for the
    others, and objects that hold the group (a DDP model's reducer, ...) are collected
    while it still exists: gloo's worker threads release the tensors of finished
    collectives, which takes the GIL, and a group destroyed later from such an object's
    destructor, with the GIL held, would wait for those threads forever.  Pass
    ``wait=False`` after a failure: the peers may be gone.

    Example::

        ctx = gnnpar.init()
        try:
            ...
        finally:
            gnnpar.shutdown()
    """
    if dist.is_initialized():
        if wait:
            if dist.get_world_size() > 1:
                dist.barrier()
            gc.collect()
            time.sleep(0.01)  # without the GIL: gloo's threads finish releasing their work
        dist.destroy_process_group()


def check_world_matches_parts(ctx: DistContext, num_parts: int, part_dir: str) -> None:
    """Raise, before any collective, when the world size differs from the part count.

    Every rank reads the same ``meta.json``, so every rank raises the same error and no
    rank is left waiting in a collective.
    """
    if num_parts != ctx.world_size:
        raise ConfigError(
            f"the partition has {num_parts} parts but {ctx.world_size} processes were "
            "started; gnnpar runs one part per process.",
            path=part_dir,
            field="num_parts",
            fix=f"start {num_parts} processes (`--nproc {num_parts}` / "
            f"`torchrun --nproc-per-node {num_parts}`), or re-partition with "
            f"`gnnpar-partition DATASET --num-parts {ctx.world_size}`.",
        )
