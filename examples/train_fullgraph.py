"""Full-graph GCN / GraphSAGE / GAT on a partitioned graph: halo exchange before each layer.

Partition once, then start one process per part::

    gnnpar-partition "synthetic:sbm?nodes=100000&feat_dim=128" --num-parts 2 --out parts/sbm-2
    torchrun --standalone --nproc-per-node 2 examples/train_fullgraph.py parts/sbm-2 \\
        --model gcn --epochs 100

(``--boundary-p 0.1`` switches on BNS-GCN boundary sampling, ``--stale`` PipeGCN stale
halos; ``--out DIR --resume`` continues a run.)  This is ``gnnpar-train --mode full``, whose
defaults are those usual for full-graph training (100 epochs, learning rate 0.01): every rank
holds the model, computes every layer for the nodes it owns — exchanging the rows of
boundary nodes with its neighbours before each aggregation — and DDP averages the
gradients, so one epoch is one gradient step on the whole graph, equal to single-process
PyG training.  Rank 0 logs, writes the run record ``OUT/record.json`` (loss and exact
accuracy per epoch, epoch time, bytes by kind) and every rank takes part in the
checkpoint ``OUT/checkpoint``.  Any dataset spec works in place of the partition
directory (it is partitioned first, one part per process).
"""

import sys

from gnnpar.train.cli import main

DEFAULTS = {"train.mode": "full"}

if __name__ == "__main__":  # --nproc starts workers that import this file
    sys.exit(main(defaults=DEFAULTS, prog="train_fullgraph.py",
              description=__doc__.split("\n\n")[0]))
