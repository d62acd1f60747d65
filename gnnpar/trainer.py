"""Distributed minibatch training of a PyG model on a partitioned graph (one rank per part).

Each rank loads its part (:class:`~gnnpar.graph.DistGraph`), serves its feature rows
(:class:`~gnnpar.feature_store.DistFeatureStore`) and samples minibatches of its own
training nodes across part boundaries (:class:`~gnnpar.loader.DistNeighborLoader`); the
model is replicated and wrapped in ``DistributedDataParallel``.  Per epoch:

* **train** — every rank takes the same number of steps.  A step's loss is the sum over
  the rank's seeds divided by the number of seeds of *all* ranks in that step (which the
  loader knows without communicating:
  :meth:`~gnnpar.loader.DistNeighborLoader.global_batch_size`), scaled by the world size
  that DDP's averaging divides by: the update is that of the mean loss over the global
  batch, also when a rank's batch is smaller or empty.  Dropout is re-seeded per step
  from ``(seed, epoch, step, rank)``, so like the sampler it carries no state that a
  checkpoint would have to hold;
* **evaluate (sampled)** — validation and test accuracy on batches sampled with the
  training fan-outs, counts all-reduced over the ranks (every ``eval_every`` epochs and
  after the last);
* **record and checkpoint** — rank 0 appends the epoch to the JSON run record
  (``OUT/record.json``: loss, accuracies, epoch time, sampled edges per second, rows
  and bytes that the training steps sent, by kind) and every rank takes part in a
  ``torch.distributed.checkpoint`` of the model, the optimizer and the loader's
  position (``OUT/checkpoint``), also every ``checkpoint_steps`` steps within an epoch.
  ``resume`` continues from it with the same batches as an uninterrupted run.

At the end, **full-neighbour inference** runs the trained layers on the whole
partitioned graph — each ``MessagePassing`` layer wrapped in the halo-exchange
:class:`~gnnpar.nn.DistConv` — so every node aggregates all its in-neighbours, layer by
layer, exactly as the same PyG model on the whole graph would.

A rank that raises or dies makes every other rank raise (see :mod:`gnnpar.faults`).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.data import Data
from tqdm import tqdm

from gnnpar.checkpoint import has_checkpoint, load_checkpoint, save_checkpoint
from gnnpar.comm import CommStats, all_reduce_sum, comm_totals, record_all_reduce
from gnnpar.config import Config
from gnnpar.distributed import DistContext, new_group
from gnnpar.faults import FailureBoard, agreed
from gnnpar.feature_store import DistFeatureStore
from gnnpar.graph import SPLITS, DistGraph, global_split_sizes
from gnnpar.loader import DistNeighborLoader
from gnnpar.models import SampledGNN, build_model, forward_batch
from gnnpar.nn import HaloGraph, NodeData, distribute_convs, evaluate
from gnnpar.run_record import RunRecord
from gnnpar.sampler import mix_int

log = logging.getLogger(__name__)

RECORD_FILE = "record.json"
CHECKPOINT_DIR = "checkpoint"
POSTFIX_EVERY = 20
"""Steps between updates of the progress bar's loss (each one waits for the device)."""
StepHook = Callable[[int, int, Data], None]
"""Called as ``hook(epoch, step, batch)`` after each optimizer step (and its checkpoint)."""


@dataclass
class _GradCounter:
    """State of the DDP communication hook that counts gradient all-reduce traffic."""

    stats: CommStats
    world_size: int
    group: dist.ProcessGroup | None


# DDP checks a hook's annotations as objects, which postponed (string) annotations are not.
def _counted_allreduce(state: _GradCounter, bucket):  # type: ignore[no-untyped-def]
    """DDP's own all-reduce, counted as kind ``"grad"`` (see :func:`~gnnpar.comm.ring_bytes`).

    Args:
        state: The counters.
        bucket: A ``dist.GradBucket`` of gradients.

    Returns:
        A ``torch.futures.Future`` of the averaged bucket.
    """
    record_all_reduce(state.stats, "grad", bucket.buffer(), state.world_size)
    return allreduce_hook(state.group, bucket)  # type: ignore[arg-type]


class Trainer:
    """Minibatch training of one replicated PyG model, one part per rank.

    Construction is collective (every rank of ``ctx`` constructs it, with the same
    configuration); so are :meth:`fit` and each evaluation.

    Args:
        cfg: The run's configuration (validated here, before any collective).
        part_dir: Partition directory with as many parts as ranks.
        ctx: Distributed context.

    Attributes:
        graph: This rank's part.
        model: The PyG model; ``sampled`` runs it on batches, ``ddp`` wraps ``sampled``.
        loader: The training loader (its position is part of every checkpoint).
        split_sizes: Global number of nodes of each split.
        stats: Communication counters of this rank (reset each epoch).
        record: The run record (written by rank 0).
    """

    def __init__(self, cfg: Config, part_dir: str | Path, ctx: DistContext) -> None:
        self.cfg = cfg.validate()
        self.ctx = ctx
        self.out = Path(cfg.train.out)
        self.part_dir = str(part_dir)
        self.board = FailureBoard.connect(ctx)
        with self.board.guard():
            self.graph = agreed(ctx, lambda: DistGraph.load(part_dir, ctx))
            self._setup()

    def _setup(self) -> None:
        cfg, ctx, graph = self.cfg, self.ctx, self.graph
        t = cfg.train
        self.split_sizes = global_split_sizes(graph, ctx)
        self.stats = CommStats()
        prefetch = t.prefetch
        fctx = new_group(ctx) if prefetch and ctx.world_size > 1 else ctx
        self.features = DistFeatureStore(graph, fctx, cache_bytes=int(cfg.data.cache_mb * 2**20),
                                         stats=self.stats)
        fanouts = list(t.fanouts)
        self.loader = DistNeighborLoader(graph, self.features, fanouts, "train", t.batch_size,
                                         shuffle=True, seed=t.seed, prefetch=prefetch)
        self.eval_loaders = {
            split: DistNeighborLoader(graph, self.features, fanouts, split, t.eval_batch_size,
                                      shuffle=False, seed=t.seed + 1)
            for split in SPLITS[1:] if self.split_sizes[split] > 0}
        meta = graph.meta
        torch.manual_seed(t.seed)  # the same initial weights on every rank
        self.model = build_model(cfg.model, meta.feat_dim, meta.num_classes).to(ctx.device)
        self.sampled = SampledGNN(self.model)
        self.ddp = DistributedDataParallel(self.sampled, process_group=ctx.group)
        self.ddp.register_comm_hook(_GradCounter(self.stats, ctx.world_size, ctx.group),
                                    _counted_allreduce)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=t.lr,
                                          weight_decay=t.weight_decay)
        self.record = RunRecord.start({**cfg.to_dict(), "part_dir": self.part_dir}, ctx)
        self.record.env["partition"] = {"name": meta.name, "num_parts": meta.num_parts,
                                        "num_nodes": meta.num_nodes,
                                        "num_edges": meta.num_edges,
                                        "partitioner": meta.partitioner.get("method")}
        self.record.env["steps_per_epoch"] = len(self.loader)

    @property
    def checkpoint_dir(self) -> Path:
        """Where checkpoints go: ``OUT/checkpoint``."""
        return self.out / CHECKPOINT_DIR

    @property
    def record_path(self) -> Path:
        """The JSON run record: ``OUT/record.json``."""
        return self.out / RECORD_FILE

    # ------------------------------------------------------------------ checkpoints
    def _save(self, partial: dict[str, float]) -> None:
        save_checkpoint(self.checkpoint_dir, self.ctx, self.model, self.optimizer, extra={
            "loader": self.loader.state_dict(), "partial": partial,
            "epochs": self.record.epochs})

    def _resume(self) -> dict[str, float]:
        """Restore the newest checkpoint; return the unfinished epoch's accumulators."""
        if not (self.cfg.train.resume and has_checkpoint(self.checkpoint_dir)):
            return {}
        extra = load_checkpoint(self.checkpoint_dir, self.ctx, self.model, self.optimizer)
        self.loader.load_state_dict(extra["loader"])
        self.record.epochs = list(extra["epochs"])
        pos = self.loader.state_dict()
        if self.ctx.is_main:
            log.info("resumed from %s at epoch %d, step %d", self.checkpoint_dir,
                     pos["epoch"], pos["step"])
        partial: dict[str, float] = extra["partial"]
        return partial

    # ------------------------------------------------------------------ training
    def _train_epoch(self, epoch: int, acc: dict[str, float],
                     hook: StepHook | None) -> dict[str, float]:
        """Run the rest of ``epoch``; ``acc`` holds its accumulators so far (resume)."""
        ctx, t = self.ctx, self.cfg.train
        acc = {"loss": 0.0, "correct": 0.0, "seeds": 0.0, "edges": 0.0, "time": 0.0, **acc}
        start = self.loader.state_dict()["step"]
        self.ddp.train()  # type: ignore[no-untyped-call]
        bar = tqdm(total=len(self.loader), initial=start, leave=False, unit="step",
                   desc=f"epoch {epoch + 1}/{t.epochs}",
                   # None: tqdm shows the bar only on a terminal, not in logs.
                   disable=None if ctx.is_main and t.progress else True)
        dev = ctx.device
        # On the device, so that a step does not wait for it; read once per epoch.
        loss_sum = torch.zeros((), dtype=torch.float64, device=dev)
        correct = torch.zeros((), dtype=torch.int64, device=dev)
        seeds = 0

        def totals(t0: float) -> dict[str, float]:
            return {**acc, "loss": acc["loss"] + float(loss_sum),
                    "correct": acc["correct"] + float(correct), "seeds": acc["seeds"] + seeds,
                    "time": acc["time"] + time.perf_counter() - t0}

        t0 = time.perf_counter()
        for step, batch in enumerate(self.loader, start):
            torch.manual_seed(mix_int(t.seed, epoch, step, ctx.rank) & ((1 << 63) - 1))
            n_global = self.loader.global_batch_size(step)
            batch = batch.to(dev)
            y = batch.y[: batch.batch_size]
            logits = forward_batch(self.ddp, batch)
            loss = F.cross_entropy(logits, y, reduction="sum")
            self.optimizer.zero_grad(set_to_none=True)
            (loss * (ctx.world_size / n_global)).backward()  # type: ignore[no-untyped-call]
            self.optimizer.step()
            loss_sum += loss.detach()
            correct += (logits.argmax(-1) == y).sum()
            seeds += batch.batch_size
            acc["edges"] += sum(batch.num_sampled_edges)
            bar.update()
            if not bar.disable and (step + 1) % POSTFIX_EVERY == 0:
                bar.set_postfix(loss=f"{float(loss_sum) / max(seeds, 1):.4f}")
            if t.checkpoint_steps and (step + 1) % t.checkpoint_steps == 0 \
                    and step + 1 < len(self.loader):
                self._save(totals(t0))
            if hook is not None:
                hook(epoch, step, batch)
        bar.close()
        return totals(t0)

    @torch.no_grad()
    def evaluate_sampled(self) -> dict[str, float]:
        """Validation and test accuracy on sampled neighbourhoods (collective).

        Returns:
            ``{"val_acc", "test_acc"}`` over all ranks' nodes; ``nan`` for an empty split.
        """
        self.model.eval()
        dev = self.ctx.device
        splits = SPLITS[1:]
        counts = torch.zeros(2 * len(splits), dtype=torch.float64, device=dev)
        for i, split in enumerate(splits):
            loader = self.eval_loaders.get(split)
            if loader is None:
                continue
            loader.set_epoch(0)  # the same sampled neighbourhoods at every evaluation
            for batch in loader:
                batch = batch.to(dev)
                pred = forward_batch(self.sampled, batch).argmax(-1)
                counts[2 * i] += (pred == batch.y[: batch.batch_size]).sum()
                counts[2 * i + 1] += batch.batch_size
        counts = all_reduce_sum(self.ctx, counts).cpu()
        return {f"{s}_acc": float(counts[2 * i] / counts[2 * i + 1])
                if counts[2 * i + 1] else float("nan") for i, s in enumerate(splits)}

    @torch.no_grad()
    def evaluate_full(self) -> tuple[dict[str, float], dict[str, dict[str, int]]]:
        """Accuracy with every in-neighbour, layer by layer on the partitioned graph.

        A copy of the model has its message-passing layers wrapped in ``DistConv``, which
        exchanges the boundary rows before each layer, so the result equals the PyG model
        run on the whole graph (collective).

        Returns:
            ``({"train_acc", "val_acc", "test_acc"}, communication totals by kind)``.
        """
        stats = CommStats()
        halo = HaloGraph.build(self.graph, self.ctx, stats=stats)
        data = NodeData.load(self.graph, self.ctx, num_global=self.split_sizes)
        model = distribute_convs(copy.deepcopy(self.model), halo)
        accuracy = evaluate(model, halo, data, self.ctx)
        return accuracy, comm_totals(stats, self.ctx)

    def fit(self, hook: StepHook | None = None) -> dict[str, Any]:
        """Train for the configured epochs (resuming when asked), then infer (collective).

        Args:
            hook: Called after every optimizer step; an exception it raises stops the run
                (the newest checkpoint stays, for ``resume``).

        Returns:
            The run record's summary (also written to :attr:`record_path` by rank 0):
            ``epochs``; ``val_acc_sampled`` / ``test_acc_sampled`` of the last epoch;
            ``train_acc_full`` / ``val_acc_full`` / ``test_acc_full`` of full-neighbour
            inference; ``epoch_time_s`` and ``sampled_edges_per_s`` (all ranks), means
            over the epochs after the first; ``comm_per_epoch`` (``{kind: {"rows",
            "bytes"}}`` sent by all ranks in the training steps, same mean);
            ``comm_full_inference``; ``wall_time_s``; ``record`` (its path).
        """
        with self.board.guard():
            return self._fit(hook)

    def _fit(self, hook: StepHook | None) -> dict[str, Any]:
        ctx, t = self.ctx, self.cfg.train
        wall = time.perf_counter()
        partial = self._resume()
        first = self.loader.state_dict()["epoch"]
        for epoch in range(first, t.epochs):
            if not partial:
                self.loader.set_epoch(epoch)
            self.stats.reset()
            acc = self._train_epoch(epoch, partial, hook)
            partial = {}
            train = all_reduce_sum(ctx, torch.tensor(
                [acc["loss"], acc["correct"], acc["seeds"], acc["edges"], acc["time"]],
                dtype=torch.float64, device=ctx.device)).cpu().tolist()
            comm = comm_totals(self.stats, ctx)
            epoch_time = train[4] / ctx.world_size
            evaluate = (epoch + 1) % t.eval_every == 0 or epoch + 1 == t.epochs
            entry = self.record.add_epoch(
                epoch, train_loss=train[0] / train[2], train_acc=train[1] / train[2],
                **(self.evaluate_sampled() if evaluate else {}), epoch_time_s=epoch_time,
                sampled_edges=int(train[3]), sampled_edges_per_s=train[3] / epoch_time,
                comm=comm)
            self.record.write(self.record_path, ctx)
            self._save({})
            if ctx.is_main:
                accuracy = (f", val {entry['val_acc']:.4f} test {entry['test_acc']:.4f} "
                            "(sampled)" if evaluate else "")
                log.info("epoch %d/%d: loss %.4f, train accuracy %.4f%s, %.2f s, %.3gM "
                         "sampled edges/s", epoch + 1, t.epochs, entry["train_loss"],
                         entry["train_acc"], accuracy, epoch_time,
                         entry["sampled_edges_per_s"] / 1e6)
        full, full_comm = self.evaluate_full()
        self.record.summary = self._summary(full, full_comm, time.perf_counter() - wall)
        self.record.write(self.record_path, ctx)
        return self.record.summary

    def _summary(self, full: dict[str, float], full_comm: dict[str, dict[str, int]],
                 wall: float) -> dict[str, Any]:
        epochs = self.record.epochs
        steady = epochs[1:] if len(epochs) > 1 else epochs  # the first one warms up
        n = max(len(steady), 1)
        last = epochs[-1] if epochs else {}
        kinds = sorted({k for e in steady for k in e["comm"]})
        return {
            "epochs": len(epochs),
            "val_acc_sampled": last.get("val_acc", float("nan")),
            "test_acc_sampled": last.get("test_acc", float("nan")),
            **{f"{k}_full": v for k, v in full.items()},
            "epoch_time_s": sum(e["epoch_time_s"] for e in steady) / n,
            "sampled_edges_per_s": sum(e["sampled_edges_per_s"] for e in steady) / n,
            "comm_per_epoch": {k: {f: sum(e["comm"].get(k, {}).get(f, 0) for e in steady) // n
                                   for f in ("rows", "bytes")} for k in kinds},
            "comm_full_inference": full_comm,
            "wall_time_s": wall,
            "record": str(self.record_path),
        }
