"""``gnnpar-train``: distributed minibatch training from the command line.

Usage::

    gnnpar-train [DATASET_OR_PARTITION_DIR] [--nproc N] [--num-parts K] [--model sage|gcn|gat]
                 [--fanouts 15,10] [--batch-size B] [--epochs E] [--lr LR] [--hidden H]
                 [--layers L] [--dropout P] [--out RUNDIR] [--resume] [--seed S] ...

``DATASET_OR_PARTITION_DIR`` is a partition directory (``gnnpar-partition``'s output) or a
dataset spec (default: the embedded synthetic graph ``synthetic:sbm``), which is
partitioned into as many parts as processes first and cached under
``ROOT/partitions`` (reused when present).

Two ways to start the processes:

* ``gnnpar-train ... --nproc N`` launches N workers on this machine with torch's own
  launcher (``torch.distributed.launcher.api.elastic_launch``, what ``torchrun`` runs);
* ``torchrun --nproc-per-node N [--nnodes ...] -m gnnpar.cli ...`` (or the
  ``gnnpar-train`` script under ``torchrun``) makes this process one worker.

Without either, it trains in one process.  At the end it prints the test accuracy
(sampled and full-neighbour), the epoch time, the sampled edges per second and the bytes
communicated by kind; ``RUNDIR/record.json`` holds everything per epoch.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import logging
import os
import re
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from gnnpar.config import Config, DataConfig, add_config_arguments, config_from_args
from gnnpar.datasets import load_dataset
from gnnpar.distributed import init, shutdown
from gnnpar.errors import ConfigError, DistributedError, GnnparError, PartitionError
from gnnpar.faults import agreed
from gnnpar.partition import partition_graph
from gnnpar.partition.format import META_FILE
from gnnpar.trainer import Trainer

PROG = "gnnpar-train"


def build_parser() -> argparse.ArgumentParser:
    """The ``gnnpar-train`` argument parser (configuration flags plus ``--nproc``)."""
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train a GNN on a graph split over several processes: distributed "
        "neighbour sampling, DDP, exact full-neighbour inference.",
        epilog="Examples:\n  gnnpar-train --nproc 2\n"
        "  gnnpar-train ogbn-products --nproc 4 --model gat --fanouts 10,10 --epochs 20\n"
        "  torchrun --nproc-per-node 2 -m gnnpar.cli parts/sbm-2 --out runs/sbm")
    parser.add_argument("--nproc", type=int, default=None,
                        help="launch this many worker processes on this machine (default: "
                        "this process is one worker of torchrun, or the only one)")
    add_config_arguments(parser)
    return parser


# ---------------------------------------------------------------------- partitions
def partition_cache_dir(data: DataConfig, num_parts: int) -> Path:
    """Where the partition of a dataset spec into ``num_parts`` parts is cached.

    The name holds a readable slug of the spec and a hash of the spec (a file's absolute
    path and modification time), the part count and the partitioner.
    """
    ident = data.dataset
    path = Path(data.dataset).expanduser()
    if path.exists():
        ident = f"{path.resolve()}@{path.stat().st_mtime_ns}"
    key = f"{ident}|{num_parts}|{data.partitioner}" + ("|undirected" if data.undirected else "")
    digest = hashlib.sha256(key.encode()).hexdigest()
    slug = re.sub(r"[^A-Za-z0-9]+", "-", data.dataset).strip("-")[:40]
    return Path(data.root) / "partitions" / f"{slug}-{num_parts}p-{data.partitioner}-{digest[:10]}"


def resolve_partition(data: DataConfig, world_size: int, create: bool,
                      progress: bool = False) -> Path:
    """The partition directory to train on, partitioning a dataset spec when needed.

    Args:
        data: Data section: a partition directory, or a spec to partition.
        world_size: Number of processes (= parts).
        create: Partition the spec when no cached partition exists (one process does).
        progress: Show the partitioner's progress bars.

    Returns:
        The partition directory (for a spec: its cache directory, which exists only when
        it was there already or ``create`` is set).
    """
    if data.num_parts is not None and data.num_parts != world_size:
        raise ConfigError(
            f"--num-parts {data.num_parts} with {world_size} processes; gnnpar runs one part "
            "per process.", field="data.num_parts",
            fix=f"pass --nproc {data.num_parts} (or torchrun --nproc-per-node "
            f"{data.num_parts}), or --num-parts {world_size}.")
    given = Path(data.dataset).expanduser()
    if (given / META_FILE).is_file():
        return given
    out = partition_cache_dir(data, world_size)
    if not create or (out / META_FILE).is_file():
        return out
    dataset = load_dataset(data.dataset, data.root)
    if data.undirected:
        dataset = dataset.to_undirected()
    try:
        partition_graph(dataset, world_size, out, method=data.partitioner, progress=progress)
    except PartitionError:
        if not (out / META_FILE).is_file():  # not just another run that finished first
            raise
    return out


# ---------------------------------------------------------------------- workers
def run_worker(cfg: Config, part_dir: str | None = None) -> dict[str, Any] | None:
    """Train as one worker of the process group in the environment (torchrun's).

    Args:
        cfg: The validated configuration.
        part_dir: The partition directory; ``None`` resolves ``cfg.data`` (rank 0
            partitions a spec when no cached partition exists).

    Returns:
        The run record on rank 0, ``None`` on the other ranks.
    """
    ctx = init(device=cfg.train.device)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    logger = logging.getLogger("gnnpar")
    if ctx.is_main and not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        if part_dir is None:
            part_dir = str(agreed(ctx, lambda: resolve_partition(
                cfg.data, ctx.world_size, create=ctx.is_main, progress=cfg.train.progress)))
        trainer = Trainer(cfg, part_dir, ctx)
        trainer.fit()
        return trainer.record.to_dict() if ctx.is_main else None
    finally:
        shutdown()


def _launched_worker(cfg: Config, part_dir: str) -> dict[str, Any] | None:
    """Entry point of a worker started by :func:`launch`: user errors come back as text."""
    try:
        return run_worker(cfg, part_dir)
    except GnnparError as exc:
        return {"error": str(exc)}


def launch(cfg: Config, nproc: int) -> dict[str, Any]:
    """Partition if needed, start ``nproc`` workers on this machine and wait for them.

    Args:
        cfg: The validated configuration.
        nproc: Number of worker processes (= parts).

    Returns:
        Rank 0's run record.
    """
    if isinstance(nproc, bool) or nproc < 1:
        raise ConfigError(f"got --nproc {nproc}.", field="nproc",
                          fix="pass --nproc N with N >= 1.")
    part_dir = resolve_partition(cfg.data, nproc, create=True, progress=cfg.train.progress)
    if cfg.train.threads is None:
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(
            cfg.train, threads=max(1, (os.cpu_count() or 1) // nproc)))
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc,
                          run_id=f"gnnpar-{uuid.uuid4().hex[:8]}", rdzv_backend="c10d",
                          rdzv_endpoint="localhost:0", max_restarts=0)
    try:
        results = elastic_launch(config, _launched_worker)(cfg, str(part_dir))
    except ChildFailedError as exc:
        lines = []
        for rank, failure in sorted(exc.failures.items()):
            message = failure.message
            if isinstance(message, dict):
                message = message.get("message", message)
            lines.append(f"rank {rank} (exit code {failure.exitcode}): {message}")
        raise DistributedError("worker processes failed:\n  " + "\n  ".join(lines)) from None
    first: dict[str, Any] | None = results[0]
    if first is None or "error" in first:
        errors = [r["error"] for r in results.values() if r and "error" in r]
        raise DistributedError(errors[0] if errors else "rank 0 returned no run record.")
    return first


# ---------------------------------------------------------------------- summary
def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    raise AssertionError("unreachable")


def format_summary(record: dict[str, Any]) -> str:
    """The end-of-run report printed by ``gnnpar-train``.

    Args:
        record: A run record (``RunRecord.to_dict()``) with its summary.
    """
    s, args, env = record["summary"], record["args"], record["env"]
    part, model, train = env.get("partition", {}), args["model"], args["train"]
    lines = [
        f"{part.get('name', '?')}: {part.get('num_nodes', 0):,} nodes, "
        f"{part.get('num_edges', 0):,} edges, {part.get('num_parts')} parts "
        f"({part.get('partitioner')}), {env['world_size']} workers ({env['device']}); "
        f"{model['name']} {model['layers']}x{model['hidden']}, fanouts "
        f"{','.join(map(str, train['fanouts']))}, batch {train['batch_size']}/rank, "
        f"{s['epochs']} epochs",
        f"test accuracy:     {s['test_acc_sampled']:.4f} sampled, "
        f"{s['test_acc_full']:.4f} full-neighbour (val {s['val_acc_sampled']:.4f} / "
        f"{s['val_acc_full']:.4f})",
        f"epoch time:        {s['epoch_time_s']:.2f} s ({env.get('steps_per_epoch')} steps; "
        "mean after the first epoch)",
        f"sampled edges/s:   {s['sampled_edges_per_s'] / 1e6:.3f} M (all ranks)",
        "communicated per epoch (all ranks):",
    ]
    for kind, c in s["comm_per_epoch"].items():
        lines.append(f"  {kind:<12} {c['rows']:>14,} rows {_size(c['bytes']):>12}")
    total = sum(c["bytes"] for c in s["comm_full_inference"].values())
    lines.append(f"full-neighbour inference: {_size(total)} halo exchange")
    lines.append(f"total wall time:   {s['wall_time_s']:.1f} s")
    lines.append(f"run record: {s['record']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``gnnpar-train``; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args).validate()
        record = launch(cfg, args.nproc) if args.nproc is not None else run_worker(cfg)
    except GnnparError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    if record is not None:
        print(format_summary(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
