"""Relation-wise GraphSAGE on a typed graph, learnable embeddings for featureless nodes.

    python examples/train_typed.py --nproc 2                      # synthetic:typed
    python examples/train_typed.py ogbn-mag --nproc 4 --relation-fanouts "cites=10,5"

or, under torchrun (several machines), partition first and train on the directory::

    gnnpar-partition ogbn-mag --num-parts 4 --out parts/mag-4
    torchrun --standalone --nproc-per-node 4 examples/train_typed.py parts/mag-4

The dataset is ``synthetic:typed`` (the default: papers labelled through their venue and
authors, no download), ``ogbn-mag`` (under ``--root``; OGB's four relations with their
reverses added, ``cites`` made symmetric), the path of an OGB ``meta_dict`` JSON with
``"is hetero": "True"``, a typed ``.npz`` or a saved ``TypedGraphDataset``.  This is
``gnnpar-train`` with the defaults usual for such graphs: METIS on the homogeneous view,
balancing every node type and the training papers, one part per process; per step a rank
samples ``--fanouts`` in-edges of every relation (``--relation-fanouts`` for some,
``REL=F1,F2;...``), gathers the paper features and the learnable rows of the featureless
types (``--embed-dim``, sharded by owner, ``--sparse-optimizer adam|adagrad`` with
``--sparse-lr``), and trains a relation-wise GraphSAGE (``to_hetero(GraphSAGE)``'s
layers) in DDP; accuracy is taken on sampled neighbourhoods (``--eval``'s default on
typed graphs).
Checkpoints hold the embedding table with the model, so ``--out DIR --resume`` continues.

Rough sizes: ogbn-mag has 1.9M nodes (736k papers with 128 features, 1.1M authors, 8.7k
institutions, 60k fields of study) and 21M edges (42M with the reverses); its embedding
table takes 0.6 GB at width 128 (plus twice that of Adam state), split across the ranks.
"""

import sys

from gnnpar.train.cli import main

DEFAULTS = {"data.dataset": "synthetic:typed", "sample.fanouts": (10, 5),
            "sample.batch_size": 512}

if __name__ == "__main__":  # --nproc starts workers that import this file
    sys.exit(main(defaults=DEFAULTS, prog="train_typed.py",
                  description=__doc__.split("\n\n")[0]))
