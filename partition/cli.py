r"""``gnnpar-partition`` (also ``python -m gnnpar.partition``): the partition stage's CLI.

Usage::

    gnnpar-partition [DATASET] --num-parts K --out DIR [data and partition flags]
                     [--overwrite] [--no-progress] [--config FILE]
    gnnpar-partition verify DIR [--dataset DATASET [data flags]]
    gnnpar-partition info DIR [--plot FILE.png]

``DATASET`` and the data flags (``--features``, ``--labels``, ``--split``,
``--undirected``, ``--root``, ...) and the partition flags (``--partitioner``,
``--halo-hops``, ``--balance``, ``--partition-seed``) are the same as ``gnnpar-train``'s:
both commands build them from the same configuration sections
(:class:`~gnnpar.datasets.config.DataConfig`,
:class:`~gnnpar.partition.config.PartitionConfig`).  The first word is read as ``verify``
/ ``info`` only when no ``--num-parts`` / ``--out`` follows, so a dataset directory that
happens to be called ``verify`` still partitions.

Examples::

    gnnpar-partition synthetic:sbm --num-parts 4 --out parts/sbm-4
    gnnpar-partition edges.csv --features x.npy --labels y.csv --split 0.6,0.2,0.2 \
        --num-parts 2 --out parts/mine-2
    gnnpar-partition ogbn-products --undirected --num-parts 8 --out parts/products-8
    gnnpar-partition verify parts/sbm-4 --dataset synthetic:sbm
    gnnpar-partition info parts/sbm-4 --plot parts/sbm-4.png
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gnnpar.artifacts.kinds import PARTITION
from gnnpar.artifacts.ownership import check_output_dir
from gnnpar.config import ArgumentParser, add_config_arguments, parse_config
from gnnpar.console import log_to_stderr
from gnnpar.datasets.config import DataConfig
from gnnpar.errors import GnnparError, PartitionError
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import PartitionMeta
from gnnpar.partition.quality import format_quality
from gnnpar.partition.stages import StageMeter
from gnnpar.partition.writer import load_data, partition_dataset

PROG = "gnnpar-partition"
_PARTITION_FLAGS = ("--num-parts", "--out", "-o")


@dataclass
class PartitionJob:
    """What ``gnnpar-partition DATASET`` partitions, and how."""

    data: DataConfig = field(default_factory=DataConfig)
    """The graph."""

    partition: PartitionConfig = field(default_factory=PartitionConfig)
    """How it is split."""


@dataclass
class VerifyJob:
    """The dataset a partition is checked against (``verify --dataset``)."""

    data: DataConfig = field(default_factory=DataConfig)
    """The graph."""


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", "-o", required=True, help="partition directory to create")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing partition in --out (only once the new one is "
                   "complete; a directory that is not a partition is never replaced)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                   help="show progress bars (default: on)")


def _partition_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=PROG, description="Split a graph into K parts (METIS by default) and write the "
        "partition directory that every gnnpar rank loads its part from. Other commands: "
        f"'{PROG} verify DIR [--dataset DATASET]', '{PROG} info DIR [--plot FILE.png]'.")
    _add_output_flags(p)
    add_config_arguments(p, PartitionJob)
    return p


def _verify_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=f"{PROG} verify", description="Check a partition directory: checksums and "
        "every invariant; with --dataset also that every value and edge round-trips (give "
        "the data flags it was partitioned with, e.g. --undirected).")
    p.add_argument("dir", metavar="DIR", help="partition directory")
    add_config_arguments(p, VerifyJob, positional=False)
    return p


def _info_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=f"{PROG} info",
                       description="Print a partition's metadata and quality report.")
    p.add_argument("dir", metavar="DIR", help="partition directory")
    p.add_argument("--plot", metavar="FILE.png", default=None,
                   help="also draw owned / halo nodes and edges per part and the edge cut "
                   "(needs matplotlib: pip install 'gnnpar[plot]')")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the picture gnnpar drew at --plot earlier")
    return p


def _run_partition(argv: Sequence[str]) -> int:
    parser = _partition_parser()
    job, ns, _ = parse_config(parser, PartitionJob, argv)
    job.data.validate()
    job.partition.validate().require_parts()
    out = Path(ns.out)
    check_output_dir(out, ns.overwrite, PARTITION, PartitionError,
                     "pass --overwrite to replace the partition in it, or choose another --out.")
    meter = StageMeter()
    meta = partition_dataset(job.data, out, job.partition, overwrite=ns.overwrite,
                             progress=ns.progress, meter=meter)
    print(f"wrote {out}: {meta.num_parts} parts of {meta.name} "
          f"({meta.num_nodes:,} nodes, {meta.num_edges:,} edges), {meta.partitioner}")
    print(format_quality(meta.quality, meta.num_edges))
    print(meter.format(meta.num_edges))
    return 0


def _run_verify(argv: Sequence[str]) -> int:
    from gnnpar.partition.verify import verify_partition

    job, ns, explicit = parse_config(_verify_parser(), VerifyJob, argv)
    dataset = load_data(job.data.validate(), True) if "data.dataset" in explicit else None
    print(verify_partition(ns.dir, dataset))
    return 0


def _run_info(argv: Sequence[str]) -> int:
    args = _info_parser().parse_args(argv)
    if args.plot:
        from gnnpar.plot import check_picture_out

        check_picture_out(args.plot, args.overwrite)  # before anything is printed
    meta = PartitionMeta.load(args.dir)
    print(f"{args.dir}: format v{meta.format_version}, {meta.name}, {meta.num_parts} parts, "
          f"{meta.num_nodes:,} nodes, {meta.num_edges:,} edges, feat_dim {meta.feat_dim}, "
          f"{meta.num_classes} classes, halo_hops {meta.halo_hops}")
    print(f"partitioner: {meta.partitioner}")
    print(f"offsets: {list(meta.offsets)}")
    if meta.has_edge_ids:
        link = {split: sum(p.get(f"num_{split}_edges", 0) for p in meta.parts)
                for split in ("train", "val", "test")}
        print(f"edges: ids stored, edge_dim {meta.edge_dim}; link supervision: "
              + ", ".join(f"{k} {v:,}" for k, v in link.items())
              + (f" ({meta.neg_kind} negatives)" if any(link.values()) else ""))
    if meta.quality:
        print(format_quality(meta.quality, meta.num_edges))
    if meta.types is not None:
        print(meta.types.format())
    if args.plot:
        from gnnpar.plot import plot_partition

        print(f"wrote {plot_partition(args.dir, args.plot, args.overwrite)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status (1 on a gnnpar error, with its message).

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    partition_form = any(a.startswith(_PARTITION_FLAGS) for a in args_list)
    commands: dict[str, Callable[[Sequence[str]], int]] = {
        "verify": _run_verify, "info": _run_info}
    log_to_stderr()
    try:
        if args_list and args_list[0] in commands and not partition_form:
            return commands[args_list[0]](args_list[1:])
        return _run_partition(args_list)
    except GnnparError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
