"""``python -m gnnpar.datasets SPEC``: load a dataset, print its statistics, optionally save it.

Examples::

    python -m gnnpar.datasets synthetic:sbm
    python -m gnnpar.datasets ogbn-arxiv --root data          # downloads when online
    python -m gnnpar.datasets edges.csv --save out/mygraph --overwrite
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from gnnpar.datasets.spec import DEFAULT_SPEC, load_dataset
from gnnpar.errors import GnnparError


def format_table(stats: dict[str, Any]) -> str:
    """Two aligned columns, ``key  value``, one statistic per line."""
    width = max(len(k) for k in stats)
    return "\n".join(f"{k:<{width}}  {v:,}" if isinstance(v, int) else f"{k:<{width}}  {v}"
                     for k, v in stats.items())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for a bad dataset or spec)."""
    parser = argparse.ArgumentParser(
        prog="python -m gnnpar.datasets",
        description="Load a dataset from a spec string, print its statistics, optionally "
                    "save it as a GraphDataset directory.")
    parser.add_argument("spec", nargs="?", default=DEFAULT_SPEC,
                        help=f"dataset spec (default: {DEFAULT_SPEC}); see gnnpar.datasets.spec")
    parser.add_argument("--root", default="data", help="directory of OGB datasets")
    parser.add_argument("--save", metavar="DIR", help="write the dataset to DIR")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing DIR")
    args = parser.parse_args(argv)
    try:
        ds = load_dataset(args.spec, args.root)
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
