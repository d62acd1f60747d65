"""Process-group setup: one process per GPU (or per CPU slot), launched by ``torchrun``.

:func:`init` reads the torchrun environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``), picks NCCL for a CUDA device and gloo for the CPU (or
describes a group the caller started), sets a collective timeout so that a dead peer
fails the run instead of hanging it, and returns a
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
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore
from torch.distributed import Store  # type: ignore[attr-defined]

from gnnpar.errors import ConfigError, DistributedError

FORCE_COLLECTIVES = "GNNPAR_FORCE_COLLECTIVES"
"""Environment variable of a testing switch: with ``1``, the collectives of a one-rank group
run instead of being skipped, so that one GPU exercises NCCL's code paths
(``benchmarks/gpu_check.sh``); not a user setting."""


def skips_collectives(group_size: int) -> bool:
    """Whether a group of ``group_size`` ranks skips its collectives (one rank, no switch)."""
    return group_size == 1 and os.environ.get(FORCE_COLLECTIVES) != "1"


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
        start: Which start of this rank this is in its launcher's store (1: the first;
            2, 3, ... once the launcher restarted its workers: :func:`init`).

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
    start: int = 1

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the rank that logs and writes records."""
        return self.rank == 0


def check_device(device: str | torch.device | None, local_world: int) -> None:
    """Refuse a device this machine cannot give each of its ``local_world`` processes.

    A CUDA device (asked for, or the default where torch sees a GPU) needs one GPU per
    process on the machine: NCCL refuses two ranks on one device.  Every message is one
    line naming the flag and the fix; ``gnnpar-train`` calls this before any worker starts
    (:func:`gnnpar.train.prepare.check_before_start`) and every rank again in :func:`init`.

    Raises:
        ConfigError: CUDA asked for where torch sees no GPU, ``cuda:K`` for several
            processes, or more processes than GPUs.
    """
    dev = None if device is None else torch.device(device)
    if dev is not None and dev.type != "cuda":
        return
    if not torch.cuda.is_available():
        if dev is None:
            return  # the default: the CPU
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise ConfigError(f"--device {device}, but torch {torch.__version__} ({build}) sees "
                          "no GPU here.", field="run.device",
                          fix="pass --device cpu (or drop --device), or install a CUDA build "
                          "of torch on a machine with a GPU.")
    if dev is not None and dev.index is not None and local_world > 1:
        raise ConfigError(
            f"device {dev} names one GPU, but {local_world} processes run on this "
            "machine and NCCL needs one GPU each.", field="run.device",
            fix="pass --device cuda: each rank takes the GPU of its LOCAL_RANK.")
    count = torch.cuda.device_count()
    if local_world > count:
        raise ConfigError(
            f"{local_world} processes on this machine but {count} GPU"
            f"{'s' if count != 1 else ''}; NCCL needs one GPU per process.", field="run.nproc",
            fix=f"pass --nproc {count} or fewer (torchrun --nproc-per-node {count}), or "
            "--device cpu.")


def _pick_device(local_rank: int, local_world: int,
                 device: str | torch.device | None) -> torch.device:
    check_device(device, local_world)
    if device is not None:
        dev = torch.device(device)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", local_rank)
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init(
    device: str | torch.device | None = None,
    timeout: timedelta = DEFAULT_TIMEOUT,
) -> DistContext:
    """Join (or start) the process group described by the torchrun environment.

    Collectives run on the device's backend: NCCL for a CUDA device, gloo for the CPU.
    Every gnnpar collective gets tensors on :attr:`DistContext.device`, so a group the
    caller made itself — NCCL only, say — works as it is: ``init`` then just describes it.

    Failures: a gloo collective that waits past ``timeout`` raises, and gnnpar's failure
    board (:mod:`gnnpar.faults`) turns that into an error naming the rank that died or
    hung.  NCCL collectives do not wait on the host: PyTorch's watchdog thread notices a
    collective past ``timeout`` and, by default, aborts the whole process (SIGABRT, with
    NCCL's message naming the collective and no gnnpar text).  So that a dead or stuck
    peer surfaces as gnnpar's error instead, a group that ``init`` creates on NCCL sets
    ``TORCH_NCCL_ASYNC_ERROR_HANDLING=2`` unless the environment sets it: the watchdog
    then aborts the communicators but not the process, the next collective or wait
    raises, and the board names the rank.  (Where the NCCL kernels of a broken peer never
    end — a hung GPU rather than a dead process — only the watchdog's abort remains;
    ``TORCH_NCCL_BLOCKING_WAIT=1`` would raise instead but makes every wait block the host.)

    Args:
        device: ``"cpu"``, ``"cuda"`` or a specific device; by default the GPU of
            ``LOCAL_RANK`` when CUDA is available, else the CPU.  ``"cuda:K"`` is only
            valid with one process per machine.
        timeout: Collective timeout after which a rank waiting on a dead peer fails.

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
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    if dist.is_initialized():  # the caller's group: describe it
        backend = str(dist.get_backend())
        if device is None:  # the group's device: a gloo-only group's tensors stay on the CPU
            device = "cuda" if "nccl" in backend and torch.cuda.is_available() else "cpu"
        dev = _pick_device(local_rank, local_world, device)
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size(),
                           local_rank=local_rank, device=dev, backend=backend,
                           timeout=timeout)
    dev = _pick_device(local_rank, local_world, device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        backend = "nccl"
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")  # raise, not abort
    else:
        backend = "gloo"
    start = 1
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and "MASTER_PORT" in os.environ:
        store, start = _agent_store(timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timeout, device_id=dev if dev.type == "cuda" else None)
    elif "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timeout,
                                device_id=dev if dev.type == "cuda" else None)
    elif world_size == 1:
        dist.init_process_group(backend, store=HashStore(), rank=0, world_size=1,
                                timeout=timeout)
    else:
        raise DistributedError(
            f"WORLD_SIZE={world_size} but MASTER_ADDR/MASTER_PORT are not set.",
            field="environment",
            fix="launch with `torchrun --nproc-per-node N ...` or `gnnpar-train --nproc N`.")
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size(),
                       local_rank=local_rank, device=dev, backend=backend, timeout=timeout,
                       start=start)


def default_group_context(device_type: str = "cpu") -> DistContext:
    """The default group, already started by the caller, as a context (starts nothing).

    For code handed the default group without :func:`init` (the DNN toolkit's
    :meth:`~gnnpar.parallel.config.ParallelConfig.build_mesh`); ``device_type`` names the
    device its tensors live on (on CUDA: the current device).
    """
    rank = dist.get_rank()
    device = (torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda"
              else torch.device(device_type))
    return DistContext(rank=rank, world_size=dist.get_world_size(),
                       local_rank=int(os.environ.get("LOCAL_RANK", str(rank))), device=device,
                       backend=str(dist.get_backend()))


STARTS_KEY = "gnnpar/starts/{rank}"
"""How many times each rank has been started in a launcher's store (its restarts)."""


def _agent_store(timeout: timedelta) -> tuple[Store, int]:
    """The launcher's store (``MASTER_ADDR:MASTER_PORT``) under this start's own prefix.

    A launcher's store (torchrun's agent, or ``gnnpar-train --nproc``'s) outlives its
    workers, so the keys with which the previous start's ranks found each other are still
    there when it restarts them: under one prefix, a restarted rank would read a dead
    peer's address and fail to connect (pytorch/pytorch#135712).  torch's own remedy, the
    agent's restart count, is not the same on every machine (a replaced machine's agent
    counts from 0), so every rank counts its own starts in the store instead: the ranks
    of one start are started together, so their counts agree.

    Returns:
        The prefixed store and this rank's start number (1 for the first).
    """
    rank = int(os.environ.get("RANK", "0"))
    store = dist.TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"),  # type: ignore[attr-defined]
                          int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)
    start = int(store.add(STARTS_KEY.format(rank=rank), 1))
    return dist.PrefixStore(f"gnnpar/start-{start}/", store), start  # type: ignore[attr-defined]


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
