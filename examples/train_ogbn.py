"""GraphSAGE / GCN / GAT on an OGB node-property dataset, one process per graph part.

    torchrun --standalone --nproc-per-node 2 examples/train_ogbn.py ogbn-arxiv \\
        --model sage --fanouts 15,10 --batch-size 1024 --epochs 10 --out runs/arxiv

The dataset is ``ogbn-arxiv`` (the default), ``ogbn-products``, ``ogbn-papers100M``
(downloaded into ``--root`` by ``ogb`` when missing) or the path of an OGB ``meta_dict``
JSON describing any dataset in OGB's on-disk layout. Rank 0 partitions it with METIS
into one part per process (made undirected first, as usual for these citation /
co-purchase graphs) and caches the partition under ``ROOT/partitions``; a partition
directory made beforehand with ``gnnpar-partition`` works in its place. Then every rank
runs :class:`gnnpar.trainer.Trainer`: distributed neighbour sampling, the PyG model in
DDP, sampled validation / test accuracy every epoch, a checkpoint every epoch
(``--resume`` continues from it), exact full-neighbour inference at the end, and the
JSON run record ``OUT/record.json``. Every hyper-parameter flag of ``gnnpar-train``
works here too (``--help``).

Rough sizes: ogbn-arxiv 169k nodes / 1.2M edges, ogbn-products 2.4M / 124M,
ogbn-papers100M 111M / 3.2B (its features alone take 53 GB: use many parts).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import gnnpar.distributed as gdist
from gnnpar.cli import format_summary
from gnnpar.config import add_config_arguments, config_from_args
from gnnpar.datasets import load_dataset
from gnnpar.faults import agreed
from gnnpar.partition import partition_graph
from gnnpar.trainer import Trainer


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_config_arguments(p)  # the flags of gnnpar-train, documented by gnnpar.config
    p.set_defaults(**{"data.dataset": "ogbn-arxiv"})
    return p.parse_args()


def partition_dir(spec: str, root: str, num_parts: int) -> Path:
    """Where the undirected partition of ``spec`` is cached (or ``spec`` if it is one)."""
    if (Path(spec) / "meta.json").is_file():
        return Path(spec)
    name = Path(spec).stem if spec.endswith(".json") else spec
    return Path(root) / "partitions" / f"{name}-undirected-{num_parts}p"


def main() -> None:
    args = parse_args()
    cfg = config_from_args(args).validate()

    # One process per part; gloo on CPU, NCCL on GPUs.
    ctx = gdist.init(device=cfg.train.device)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)

    # Rank 0 partitions the dataset unless that was done before; if it fails, every
    # rank raises its error instead of waiting for the others.
    part_dir = partition_dir(cfg.data.dataset, cfg.data.root, ctx.world_size)

    def make_partition() -> None:
        if ctx.is_main and not (part_dir / "meta.json").is_file():
            dataset = load_dataset(cfg.data.dataset, cfg.data.root).to_undirected()
            partition_graph(dataset, ctx.world_size, part_dir, method=cfg.data.partitioner,
                            progress=True)

    agreed(ctx, make_partition)

    # Train, evaluate every epoch, checkpoint, infer with full neighbourhoods.
    trainer = Trainer(cfg, part_dir, ctx)
    trainer.fit()
    if ctx.is_main:
        print(format_summary(trainer.record.to_dict()))
    gdist.shutdown()


if __name__ == "__main__":
    main()
