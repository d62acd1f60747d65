"""GraphSAGE / GCN / GAT on an OGB node-property dataset, one process per graph part.

    python examples/train_ogbn.py ogbn-arxiv --nproc 2 --fanouts 15,10 --epochs 10

or, under torchrun (several machines), partition first and train on the directory::

    gnnpar-partition ogbn-arxiv --undirected --num-parts 2 --out parts/arxiv-2
    torchrun --standalone --nproc-per-node 2 examples/train_ogbn.py parts/arxiv-2

The dataset is ``ogbn-arxiv`` (the default), ``ogbn-products``, ``ogbn-papers100M``
(downloaded into ``--root`` by ``ogb`` when missing) or the path of an OGB ``meta_dict``
JSON describing any dataset in OGB's on-disk layout.  This is ``gnnpar-train`` with the
defaults usual for these graphs: made undirected before partitioning (as these citation
/ co-purchase graphs are trained; ``--no-undirected`` keeps them directed), fan-outs
15,10.  With ``--nproc`` the dataset is partitioned with METIS into one part per process
before the workers start and cached under ``ROOT/partitions``; under torchrun no rank
partitions while the others wait, so a dataset without a cached partition is refused with
the ``gnnpar-partition`` command that makes it.  Every rank then runs
:class:`gnnpar.Trainer`: distributed neighbour sampling, the PyG model in DDP, sampled
validation / test accuracy every epoch, a checkpoint every epoch, exact full-neighbour
inference at the end, and the run record ``OUT/record.json`` (default ``OUT``: a new
``runs/ogbn-arxiv-sample[-N]``).  Every flag of ``gnnpar-train`` works here too
(``--help``); ``--out DIR --resume`` continues a run.

Rough sizes: ogbn-arxiv 169k nodes / 1.2M edges, ogbn-products 2.4M / 124M,
ogbn-papers100M 111M / 3.2B (its features alone take 53 GB: use many parts).
"""

import sys

from gnnpar.train.cli import main

DEFAULTS = {"data.dataset": "ogbn-arxiv", "data.undirected": True, "sample.fanouts": (15, 10)}

if __name__ == "__main__":  # --nproc starts workers that import this file
    sys.exit(main(defaults=DEFAULTS, prog="train_ogbn.py",
                  description=__doc__.split("\n\n")[0]))
