"""Full-graph GCN / GraphSAGE / GAT training on a partitioned graph, with halo exchange.

Partition once, then start one process per part::

    gnnpar-partition "synthetic:sbm?nodes=100000&feat_dim=128" --num-parts 2 --out parts/sbm-2
    torchrun --standalone --nproc-per-node 2 examples/train_fullgraph.py \\
        --part-dir parts/sbm-2 --model sage --epochs 100 --record runs/sage.json \\
        --checkpoint runs/sage-ckpt

(``--resume`` continues from ``--checkpoint``; ``--boundary-p 0.1`` switches on BNS-GCN
boundary sampling, ``--stale`` PipeGCN stale halos.)  Any dataset the partitioner reads —
OGB node-property datasets, an OGB-layout directory, a gnnpar dataset directory — trains
the same way.

Every rank holds the model, computes every layer for the nodes it owns (exchanging the
rows of boundary nodes with its neighbours before each aggregation), and the gradients
are summed over the ranks: one epoch is one gradient step on the whole graph, equal to
single-process PyG training.  Rank 0 logs, shows the progress bar, writes the JSON run
record (arguments, per-epoch loss and accuracy, epoch time, bytes sent by kind) and, with
``--checkpoint``, a torch.distributed.checkpoint of model + optimizer every
``--checkpoint-every`` epochs.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

import torch
from tqdm import tqdm

import gnnpar.distributed as gdist
from gnnpar.checkpoint import has_checkpoint, load_checkpoint, save_checkpoint
from gnnpar.comm import CommStats, comm_totals
from gnnpar.config import ModelConfig
from gnnpar.graph import DistGraph
from gnnpar.models import MODELS, build_model
from gnnpar.nn import (
    HaloGraph,
    NodeData,
    broadcast_parameters,
    distribute_convs,
    evaluate,
    flush_pipelines,
    train_epoch,
)
from gnnpar.run_record import RunRecord

log = logging.getLogger("train_fullgraph")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--part-dir", required=True, help="partition directory (gnnpar-partition)")
    p.add_argument("--model", choices=sorted(MODELS), default="sage")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4, help="attention heads (GAT)")
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=1)
    p.add_argument("--boundary-p", type=float, default=None,
                   help="BNS-GCN: send each boundary row with this probability per epoch")
    p.add_argument("--stale", action="store_true", help="PipeGCN: previous iteration's halos")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads per rank")
    p.add_argument("--device", default=None, help="cpu, cuda (default: cuda if available)")
    p.add_argument("--record", default="fullgraph_record.json", help="JSON run record")
    p.add_argument("--checkpoint", default=None, help="checkpoint directory")
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.resume and not args.checkpoint:
        p.error("--resume needs --checkpoint DIR")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    started = not torch.distributed.is_initialized()
    ctx = gdist.init(device=args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO if ctx.is_main else logging.WARNING,
                        format="%(asctime)s %(name)s: %(message)s")

    # This rank's part, its halo exchange and its nodes.
    dist_graph = DistGraph.load(args.part_dir, ctx)
    stats = CommStats()
    graph = HaloGraph.build(dist_graph, ctx, stats=stats, boundary_p=args.boundary_p,
                            stale=args.stale, seed=args.seed)
    data = NodeData.load(dist_graph, ctx)
    meta = dist_graph.meta
    log.info("%s: %d nodes, %d edges, %d parts; this rank owns %d nodes, %d halo",
             meta.name, meta.num_nodes, meta.num_edges, meta.num_parts,
             graph.num_owned, graph.num_halo)

    # A PyG model, replicated; its message-passing layers run on the partitioned graph.
    torch.manual_seed(args.seed)
    model_cfg = ModelConfig(name=args.model, hidden=args.hidden, layers=args.layers,
                            dropout=args.dropout, heads=args.heads)
    model = build_model(model_cfg, meta.feat_dim, meta.num_classes).to(ctx.device)
    broadcast_parameters(model, ctx)
    model = distribute_convs(model, graph)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr,
                                 weight_decay=args.weight_decay)

    record = RunRecord.start(vars(args), ctx)
    start_epoch, best = 0, {"val_acc": -1.0, "test_acc": float("nan"), "epoch": -1}
    if args.resume and has_checkpoint(args.checkpoint):
        extra = load_checkpoint(args.checkpoint, ctx, model, optimizer)
        start_epoch, best = int(extra["epoch"]) + 1, extra["best"]
        record.epochs = list(extra["epochs"])
        log.info("resumed from %s at epoch %d", args.checkpoint, start_epoch)
    stats.reset()

    bar = tqdm(range(start_epoch, args.epochs), desc="epochs", unit="epoch",
               disable=not ctx.is_main or args.no_progress)
    for epoch in bar:
        t0 = time.perf_counter()
        loss = train_epoch(model, graph, data, optimizer, ctx, epoch=epoch, stats=stats)
        epoch_time = time.perf_counter() - t0
        sent = {kind: c["bytes"] for kind, c in comm_totals(stats, ctx).items()}
        metrics: dict[str, Any] = {"loss": loss, "epoch_time_s": epoch_time, "comm_bytes": sent}
        stats.reset()
        if (epoch + 1) % args.eval_every == 0 or epoch + 1 == args.epochs:
            metrics.update(evaluate(model, graph, data, ctx))
            if metrics["val_acc"] > best["val_acc"]:
                best = {"val_acc": metrics["val_acc"], "test_acc": metrics["test_acc"],
                        "epoch": epoch}
            bar.set_postfix(loss=f"{loss:.4f}", val=f"{metrics['val_acc']:.4f}")
        record.add_epoch(epoch, **metrics)
        record.write(args.record, ctx)
        if args.checkpoint and ((epoch + 1) % args.checkpoint_every == 0
                                or epoch + 1 == args.epochs):
            flush_pipelines(model)
            save_checkpoint(args.checkpoint, ctx, model, optimizer,
                            extra={"epoch": epoch, "best": best, "epochs": record.epochs})
    flush_pipelines(model)

    times = [e["epoch_time_s"] for e in record.epochs]
    kinds = sorted({kind for e in record.epochs for kind in e["comm_bytes"]})
    record.summary = {
        "best_val_acc": best["val_acc"], "test_acc_at_best_val": best["test_acc"],
        "best_epoch": best["epoch"],
        "mean_epoch_time_s": sum(times) / len(times) if times else float("nan"),
        "comm_bytes_per_epoch": {k: sum(e["comm_bytes"].get(k, 0) for e in record.epochs)
                                 / max(len(record.epochs), 1) for k in kinds},
    }
    record.write(args.record, ctx)
    log.info("best val %.4f (epoch %d), test %.4f; record: %s", best["val_acc"],
             best["epoch"], best["test_acc"], args.record)
    if started:
        gdist.shutdown()
    return record.to_dict()


if __name__ == "__main__":
    main()
