r"""``python -m gnnpar.datasets [DATASET]``: load a dataset, print its statistics, save it.

The data flags are ``gnnpar-train``'s and ``gnnpar-partition``'s (the ``data`` section,
:class:`~gnnpar.datasets.config.DataConfig`), so an edge list with its features, labels
and split can be checked once and saved as a dataset directory that every command reads::

    python -m gnnpar.datasets synthetic:sbm
    python -m gnnpar.datasets ogbn-arxiv --root data          # downloads when online
    python -m gnnpar.datasets edges.csv --features x.npy --labels y.csv \\
        --split 0.6,0.2,0.2 --save data/mygraph
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gnnpar.artifacts.kinds import DATASET
from gnnpar.artifacts.ownership import check_output_dir
from gnnpar.config import ArgumentParser, add_config_arguments, parse_config
from gnnpar.console import log_to_stderr
from gnnpar.datasets.config import DataConfig
from gnnpar.errors import DatasetError, GnnparError


@dataclass
class DatasetJob:
    """The dataset to load."""

    data: DataConfig = field(default_factory=DataConfig)
    """The graph."""


def format_table(stats: dict[str, Any]) -> str:
    """Two aligned columns, ``key  value``, one statistic per line."""
    width = max(len(k) for k in stats)
    return "\n".join(f"{k:<{width}}  {v:,}" if isinstance(v, int) else f"{k:<{width}}  {v}"
                     for k, v in stats.items())


def build_parser() -> ArgumentParser:
    """The ``python -m gnnpar.datasets`` argument parser."""
    parser = ArgumentParser(
        prog="python -m gnnpar.datasets",
        description="Load a dataset, print its statistics, optionally save it as a "
                    "GraphDataset directory (with the edge list's features, labels, split).")
    parser.add_argument("--save", metavar="DIR", help="write the dataset to DIR")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing DIR")
    add_config_arguments(parser, DatasetJob)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for a bad dataset or spec)."""
    parser = build_parser()
    log_to_stderr()
    try:
        job, args, _ = parse_config(parser, DatasetJob, argv)
        if args.save:  # before the dataset is read
            check_output_dir(args.save, args.overwrite, DATASET, DatasetError,
                             "pass --overwrite to replace the dataset gnnpar saved there, or "
                             "another --save.", field="--save")
        ds = job.data.validate().load_any()
        print(format_table(ds.summary()))
        if args.save:
            out = ds.save(args.save, overwrite=args.overwrite, validate=False)  # just loaded
            print(f"saved to {out}")
    except GnnparError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
