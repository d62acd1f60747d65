"""``gnnpar-partition`` (also ``python -m gnnpar.partition``): the partition stage's CLI.

Usage::

    gnnpar-partition DATASET --num-parts K --out DIR [--method metis|random|contiguous]
                     [--halo-hops 1] [--balance nodes,train,edges] [--seed S]
                     [--overwrite] [--root DATA_ROOT] [--quiet]
    gnnpar-partition verify DIR [--dataset DATASET] [--root DATA_ROOT]
    gnnpar-partition info DIR

``DATASET`` is a dataset spec (see :func:`gnnpar.datasets.load_dataset`), e.g.
``synthetic:sbm?nodes=100000``, ``ogbn-arxiv`` or a saved dataset directory.  The first
word is read as ``verify`` / ``info`` only when no ``--num-parts`` / ``--out`` follows,
so a dataset directory that happens to be called ``verify`` still partitions.

Examples::

    gnnpar-partition synthetic:sbm --num-parts 4 --out parts/sbm-4
    gnnpar-partition ogbn-products --num-parts 8 --out parts/products-8 --root data
    gnnpar-partition verify parts/sbm-4 --dataset synthetic:sbm
    gnnpar-partition info parts/sbm-4
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from gnnpar.errors import GnnparError, PartitionError
from gnnpar.partition.assign import BALANCE_QUANTITIES, DEFAULT_BALANCE, METHODS
from gnnpar.partition.format import PartitionMeta
from gnnpar.partition.quality import format_quality

if TYPE_CHECKING:
    from gnnpar.datasets.graph import GraphDataset

PROG = "gnnpar-partition"
_PARTITION_FLAGS = ("--num-parts", "--out", "-k", "-o")


def _partition_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Split a graph into K parts (METIS by default) and write the "
        "partition directory that every gnnpar rank loads its part from. Other commands: "
        f"'{PROG} verify DIR [--dataset DATASET]', '{PROG} info DIR'.")
    p.add_argument("dataset", metavar="DATASET",
                   help="dataset spec: synthetic:sbm[?key=value&...], an OGB name, a saved "
                   "dataset directory, .npz or edge list")
    p.add_argument("--num-parts", "-k", type=int, required=True, help="number of parts K")
    p.add_argument("--out", "-o", required=True, help="partition directory to create")
    p.add_argument("--method", choices=METHODS, default="metis", help="default: metis")
    p.add_argument("--halo-hops", type=int, default=1,
                   help="halo depth; halo nodes within hops-1 also keep their in-edges "
                   "(default: 1)")
    p.add_argument("--balance", default=",".join(DEFAULT_BALANCE),
                   help=f"comma-separated quantities METIS balances, of "
                   f"{','.join(BALANCE_QUANTITIES)} (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="METIS / random seed (default: 0)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --out (only once the new one is complete)")
    p.add_argument("--root", default="data", help="directory of OGB datasets (default: data)")
    p.add_argument("--undirected", action="store_true",
                   help="add every reverse edge (deduplicated) first, as usual for directed "
                   "citation graphs such as ogbn-arxiv")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    return p


def _verify_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{PROG} verify", description="Check a partition directory: checksums and "
        "every invariant; with --dataset also that every value and edge round-trips.")
    p.add_argument("dir", metavar="DIR", help="partition directory")
    p.add_argument("--dataset", help="spec of the source dataset")
    p.add_argument("--undirected", action="store_true",
                   help="add every reverse edge (deduplicated) to the source dataset, as when "
                   "it was partitioned with --undirected")
    p.add_argument("--root", default="data", help="directory of OGB datasets (default: data)")
    return p


def _info_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{PROG} info",
                                description="Print a partition's metadata and quality report.")
    p.add_argument("dir", metavar="DIR", help="partition directory")
    return p


def _load(spec: str, root: str, progress: bool, undirected: bool) -> GraphDataset:
    from gnnpar.datasets import load_dataset

    with tqdm(total=1, desc=f"load {spec}", disable=not progress) as bar:
        dataset = load_dataset(spec, root)
        if undirected:
            dataset = dataset.to_undirected()
        bar.update()
    return dataset


def _run_partition(args: argparse.Namespace) -> int:
    from gnnpar.partition.writer import partition_graph

    progress = not args.quiet
    if Path(args.out).exists() and not args.overwrite:
        raise PartitionError("the output directory already exists.", path=args.out,
                             fix="pass --overwrite or choose another --out.")
    dataset = _load(args.dataset, args.root, progress, args.undirected)
    meta = partition_graph(
        dataset, args.num_parts, args.out, method=args.method, halo_hops=args.halo_hops,
        balance=tuple(b.strip() for b in args.balance.split(",") if b.strip()),
        seed=args.seed, overwrite=args.overwrite, progress=progress,
        validate=False)  # load_dataset validated it (to_undirected keeps it valid)
    print(f"wrote {args.out}: {meta.num_parts} parts of {meta.name} "
          f"({meta.num_nodes:,} nodes, {meta.num_edges:,} edges), {meta.partitioner}")
    print(format_quality(meta.quality, meta.num_edges))
    return 0


def _run_verify(args: argparse.Namespace) -> int:
    from gnnpar.partition.verify import verify_partition

    dataset = (None if args.dataset is None
               else _load(args.dataset, args.root, True, args.undirected))
    print(verify_partition(args.dir, dataset))
    return 0


def _run_info(args: argparse.Namespace) -> int:
    meta = PartitionMeta.load(args.dir)
    print(f"{args.dir}: format v{meta.format_version}, {meta.name}, {meta.num_parts} parts, "
          f"{meta.num_nodes:,} nodes, {meta.num_edges:,} edges, feat_dim {meta.feat_dim}, "
          f"{meta.num_classes} classes, halo_hops {meta.halo_hops}")
    print(f"partitioner: {meta.partitioner}")
    print(f"offsets: {list(meta.offsets)}")
    if meta.quality:
        print(format_quality(meta.quality, meta.num_edges))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status (1 on a gnnpar error, with its message).

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    partition_form = any(a.startswith(_PARTITION_FLAGS) for a in args_list)
    commands: dict[str, tuple[Callable[[], argparse.ArgumentParser],
                              Callable[[argparse.Namespace], int]]] = {
        "verify": (_verify_parser, _run_verify), "info": (_info_parser, _run_info)}
    try:
        if args_list and args_list[0] in commands and not partition_form:
            make_parser, run = commands[args_list[0]]
            return run(make_parser().parse_args(args_list[1:]))
        return _run_partition(_partition_parser().parse_args(args_list))
    except GnnparError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
