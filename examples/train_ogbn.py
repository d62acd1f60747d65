"""GraphSAGE / GCN / GAT on an OGB node-property dataset, one process per graph part.

    torchrun --standalone --nproc-per-node 2 examples/train_ogbn.py ogbn-arxiv \\
        --model sage --fanouts 15,10 --batch-size 1024 --epochs 10 --out runs/arxiv

The dataset is ``ogbn-arxiv`` (the default), ``ogbn-products``, ``ogbn-papers100M``
(downloaded into ``--root`` by ``ogb`` when missing) or the path of an OGB ``meta_dict``
JSON describing any dataset in OGB's on-disk layout. This is ``gnnpar-train`` with other
defaults, run by :func:`gnnpar.cli.run_worker`: rank 0 partitions the dataset with METIS
into one part per process (made undirected first, as usual for these citation /
co-purchase graphs; ``--no-undirected`` keeps it as it is) and caches the partition
under ``ROOT/partitions``; a partition directory made beforehand with
``gnnpar-partition`` works in its place. Then every rank runs
:class:`gnnpar.trainer.Trainer`: distributed neighbour sampling, the PyG model in DDP,
sampled validation / test accuracy every epoch, a checkpoint every epoch (``--resume``
continues from it), exact full-neighbour inference at the end, and the JSON run record
``OUT/record.json``. Every flag of ``gnnpar-train`` works here too (``--help``).

Rough sizes: ogbn-arxiv 169k nodes / 1.2M edges, ogbn-products 2.4M / 124M,
ogbn-papers100M 111M / 3.2B (its features alone take 53 GB: use many parts).
"""

from __future__ import annotations

import argparse

from gnnpar.cli import format_summary, run_worker
from gnnpar.config import add_config_arguments, config_from_args

# The flags of gnnpar-train (documented by gnnpar.config), with this example's defaults.
parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
add_config_arguments(parser)
parser.set_defaults(**{"data.dataset": "ogbn-arxiv", "data.undirected": True})
cfg = config_from_args(parser.parse_args()).validate()

# Partition (rank 0, unless cached), train, evaluate every epoch, checkpoint, infer with
# full neighbourhoods; rank 0 gets the run record.
record = run_worker(cfg)
if record is not None:
    print(format_summary(record))
