"""``Trainer``: one training loop for every mode, one part per rank.

Each rank loads its part (:class:`~gnnpar.storage.graph.DistGraph`), builds the same PyG model
(same seed on every rank) and wraps it in ``DistributedDataParallel`` — the one gradient
synchronisation of every mode but the grid's.  One loop (:meth:`Trainer._train_epoch`)
runs every mode's steps: the mode's engine (:class:`~gnnpar.train.engine.Engine`) supplies
the batches and each one's forward pass and loss; the loop asks what an engine does,
never which one it is:

* ``sample`` — :class:`~gnnpar.train.minibatch.MinibatchEngine`: minibatches of sampled
  neighbourhoods, validation and test accuracy on sampled neighbourhoods;
* ``full`` — :class:`~gnnpar.train.fullgraph.FullGraphEngine`: one exact (or BNS /
  stale) whole-graph step per epoch, exact evaluation; with ``full.grid``,
  :class:`~gnnpar.train.grid.GridEngine`, the same on 3D-parallel layers (no DDP: the
  layers' collectives synchronise the sharded weights);
* ``--task link`` — :class:`~gnnpar.train.link.LinkEngine`: minibatches seeded by the
  training supervision edges, with negatives; exact MRR / Hits@K evaluation.

Per epoch, rank 0 appends the epoch to the run record ``OUT/record.json``
(:mod:`gnnpar.train.record`: loss, accuracies, epoch time, rows and bytes by kind —
training steps and evaluation counted apart) and every rank takes part in a checkpoint
(:mod:`gnnpar.train.checkpoint`) of the model, the optimizer and the engine's position
(``OUT/checkpoint``, every ``checkpoint_every`` epochs, in sample mode every
``checkpoint_steps`` steps, and every ``checkpoint_every_s`` seconds:
:class:`~gnnpar.train.cadence.CheckpointCadence`).  ``resume`` continues from it with the
same batches as an uninterrupted run, and refuses other settings
(:func:`~gnnpar.train.rundir.check_resume`).  Under a launcher that restarts its workers
(:mod:`gnnpar.train.elastic`), every rank that fails notes why in the launcher's store,
and a restarted rank 0 records the restart in the run record.
Every evaluation is also compared by its validation figure (:mod:`gnnpar.train.best`, as
OGB's protocol selects a model): the best one's figures head the summary, beside the last
epoch's, its weights go to ``OUT/best`` (``--save-best``), and ``--early-stop P`` ends the
run after ``P`` evaluations without a better one.
Dropout is re-seeded per step from ``(seed, epoch, step, rank)``, so like the sampler it
carries no state a checkpoint would have to hold.

At the end, as ``--eval`` asks, **full-neighbour inference** (the default but on typed
graphs, whose ``auto`` is ``sampled``: :meth:`~gnnpar.train.config.Config.for_graph`) runs the
trained layers on the whole partitioned graph exactly as the same PyG model on the whole
graph would — layer by layer, one halo exchange per layer, each layer in chunks of owned
nodes under ``--eval-budget-mb`` (:mod:`gnnpar.nn.inference`) — or the last sampled
evaluation is reported as final (``sampled``), or nothing (``none``); the summary's
``eval`` says which.
A rank that raises or dies makes every other rank raise, naming it
(:mod:`gnnpar.faults`).

Example (every rank of ``torchrun --nproc-per-node 2 my_script.py``)::

    from gnnpar import Config, Trainer, init
    from gnnpar.train.config import RunConfig

    ctx = init()
    cfg = Config(run=RunConfig(out="runs/mine"))
    summary = Trainer(cfg, "parts/sbm-2", ctx).fit()   # rank 0 also writes OUT/record.json
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from gnnpar.artifacts.files import write_json_atomic
from gnnpar.artifacts.kinds import (
    BEST_DIR,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    PREDICTIONS_DIR,
    RECORD_FILE,
)
from gnnpar.comm import (
    CommStats,
    all_gather_ints,
    all_reduce_sum,
    comm_totals,
    count_gradients,
    per_rank,
)
from gnnpar.console import bars_off, format_duration
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.evaluation.node import full_neighbour_accuracy
from gnnpar.faults import FailureBoard, agreed
from gnnpar.keys import mix_int
from gnnpar.models.link import LinkDecoder
from gnnpar.models.node import build_model
from gnnpar.nn.dist_conv import flush_pipelines
from gnnpar.partition.format import content_digest
from gnnpar.sizes import peak_rss_bytes, rss_bytes
from gnnpar.storage.graph import DistGraph, global_split_sizes
from gnnpar.train.best import BestValid
from gnnpar.train.cadence import CheckpointCadence, timed_seconds
from gnnpar.train.checkpoint import (
    checkpoint_digest,
    load_checkpoint,
    read_state,
    save_checkpoint,
)
from gnnpar.train.config import Config
from gnnpar.train.elastic import RestartNotes, max_restarts, restart_number
from gnnpar.train.engine import PHASES, SUMS, Engine, StepHook
from gnnpar.train.fullgraph import FullGraphEngine
from gnnpar.train.grid import GridEngine
from gnnpar.train.hetero import HeteroEngine, build_hetero_model
from gnnpar.train.link import LinkEngine, LinkModule
from gnnpar.train.metrics import StepLog, format_eta, open_metrics
from gnnpar.train.minibatch import MinibatchEngine
from gnnpar.train.outputs import (
    predictions_dir,
    wants_outputs,
    write_node_outputs,
    write_typed_outputs,
)
from gnnpar.train.parallel_dims import ParallelDims
from gnnpar.train.prepare import check_graph_settings, startup_timeout
from gnnpar.train.record import RunRecord, format_startup
from gnnpar.train.rundir import (
    check_resume,
    check_run_dir,
    commit_replacement,
    run_files,
)
from gnnpar.train.sync import average_model

log = logging.getLogger("gnnpar")

LINK_FIELDS = ("val_mrr", "test_mrr", "val_hits", "test_hits")
EVAL_FIELDS = ("val_acc", "test_acc", *LINK_FIELDS)
"""What an engine's ``evaluate`` may return (each epoch's record holds them all)."""

STEP_HOST_SYNCS = 0
"""Host reads of a training step (forward, backward, optimiser): none; the epoch's sums
are read once at its end (and every :data:`POSTFIX_EVERY` steps for a progress bar, and
on rank 0 once per log line or scalar flush, :class:`~gnnpar.train.metrics.StepLog`:
every ``--log-every`` steps, by default about every 10 s)."""
POSTFIX_EVERY = 20
"""Steps between updates of the progress bar's loss (each one waits for the device)."""


def peak_memory(ctx: DistContext, start_rss: int) -> dict[str, int | None]:
    """The largest peak over the ranks of host memory (RSS) and CUDA memory (collective).

    Args:
        ctx: Distributed context.
        start_rss: This rank's resident memory when its Trainer began.

    Returns:
        ``{"host": bytes, "host_growth": bytes, "device": bytes or None}``: resident set
        size (Linux ``ru_maxrss``), its rise over ``start_rss`` (what the run's data and
        state took, without the imported libraries), and
        ``torch.cuda.max_memory_allocated`` on a CUDA device.
    """
    host = peak_rss_bytes()
    cuda = ctx.device.type == "cuda"
    device = torch.cuda.max_memory_allocated(ctx.device) if cuda else 0
    peak = all_gather_ints(ctx, [host, host - start_rss, device]).max(dim=0).values.tolist()
    return {"host": int(peak[0]), "host_growth": int(peak[1]),
            "device": int(peak[2]) if cuda else None}


def _mean(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


class Trainer:
    """Training of one replicated PyG model on a partitioned graph, one part per rank.

    Construction is collective (every rank of ``ctx`` constructs it, with the same
    configuration); so is :meth:`fit`.

    Args:
        cfg: The run's configuration (validated here, before any collective, and its
            ``auto`` settings made the part's graph's: :meth:`Config.for_graph`);
            ``cfg.run.out`` is the run directory.
        part_dir: Partition directory with as many parts as ranks.
        ctx: Distributed context.
        startup: Seconds of the command's start-up phases before the Trainer.
        started: When the command started (``time.monotonic()``; default: now): the
            run's wall time counts from there.

    Attributes:
        graph: This rank's part.
        model: The PyG model (``engine.module`` runs it; ``ddp`` wraps that).
        dims: The run's process groups, built once here and passed to the engine
            (:class:`~gnnpar.train.parallel_dims.ParallelDims`).
        engine: The mode's :class:`Engine`.
        split_sizes: Global number of nodes of each split.
        stats: Communication counters of the training steps (reset each epoch).
        eval_stats: Counters of the evaluations.
        record: The run record (written by rank 0).

    Example::

        ctx = gnnpar.init()
        cfg = gnnpar.Config(run=RunConfig(out="runs/mine"))
        summary = gnnpar.Trainer(cfg, "parts/sbm-2", ctx).fit()
        summary["test_acc"]
    """

    def __init__(self, cfg: Config, part_dir: str | Path, ctx: DistContext,
                 startup: dict[str, float] | None = None,
                 started: float | None = None) -> None:
        self._start_rss = rss_bytes()
        self.started = time.monotonic() if started is None else started
        self.startup = dict(startup or {})
        setup_start = time.time()
        self.cfg = cfg.validate()
        if cfg.run.out is None:
            raise ConfigError("the Trainer needs a run directory.", field="run.out",
                              fix="set cfg.run.out (gnnpar-train picks a new one itself).")
        self.ctx = ctx
        self.out = Path(cfg.run.out)
        self.part_dir = str(part_dir)
        self.board = FailureBoard.connect(ctx)
        # Never written into a directory holding what gnnpar did not write.
        agreed(ctx, lambda: check_run_dir(self.out, cfg.run.resume) if ctx.is_main else None)
        with self.board.guard():
            # Verifying a large part can outlast the collective timeout: no rank waits in a
            # collective meanwhile, the start-up timeout bounds the wait (docs/startup.md).
            self.graph = self.board.settle(lambda: DistGraph.load(part_dir, ctx),
                                           startup_timeout(cfg, part_dir),
                                           "load and verify its part")
            self._setup()
        self.startup["setup"] = time.time() - setup_start

    def _setup(self) -> None:
        ctx, graph = self.ctx, self.graph
        self.cfg = cfg = self.cfg.for_graph(graph.meta.types is not None)
        self.partition_digest = content_digest(self.part_dir)  # what checkpoints bind to
        self.link = cfg.data.task == "link"
        self.typed = graph.meta.types is not None
        self.split_sizes = global_split_sizes(graph, ctx, cfg.data.task)
        self.stats, self.eval_stats = CommStats(), CommStats()
        meta = graph.meta
        torch.manual_seed(cfg.train.seed)  # the same initial weights on every rank
        out = cfg.model.hidden if self.link else meta.num_classes
        engine_cls: Callable[..., Engine] = MinibatchEngine if cfg.train.mode == "sample" else (
            FullGraphEngine if cfg.full.grid is None else GridEngine)
        check_graph_settings(cfg, self.part_dir, meta.types.layout if meta.types else None,
                             meta.feat_dim, meta.num_classes)
        if meta.types is not None:
            self.model = build_hetero_model(cfg.model, graph, out).to(ctx.device)
            engine_cls = HeteroEngine
        else:
            width = meta.feat_dim or cfg.model.embedding_width()  # featureless: embeddings
            self.model = build_model(cfg.model, width, out).to(ctx.device)
        self.trained: nn.Module = self.model  # what the optimizer steps and checkpoints hold
        if self.link:
            self.trained = LinkModule(self.model, LinkDecoder(
                cfg.link.decoder, cfg.model.hidden, dropout=cfg.model.dropout)).to(ctx.device)
            engine_cls = LinkEngine
        self.dims = ParallelDims.build(cfg, ctx, self.stats)
        self.engine: Engine = engine_cls(cfg, graph, self.dims, self.trained, self.split_sizes,
                                         self.stats)
        self.ddp: nn.Module
        if not self.engine.replicated:  # sharded weights, synchronised by the layers
            self.trained = self.ddp = self.engine.module
        else:
            self.ddp = DistributedDataParallel(self.engine.module, process_group=self.dims.data)
            count_gradients(self.ddp, self.stats, ctx.world_size, self.dims.data)
        self.optimizer = torch.optim.Adam(self.trained.parameters(), lr=cfg.train.lr,
                                          weight_decay=cfg.train.weight_decay)
        self.record = RunRecord(
            config=cfg.to_dict(),
            partition={"dir": self.part_dir, "name": meta.name, "num_parts": meta.num_parts,
                       "num_nodes": meta.num_nodes, "num_edges": meta.num_edges,
                       "feat_dim": meta.feat_dim, "feature_dtype": meta.feature_dtype,
                       "num_classes": meta.num_classes,
                       "partitioner": meta.partitioner.get("method"),
                       "node_types": list(meta.types.layout.node_types) if meta.types
                       else None},
            env=RunRecord.environment(ctx.world_size, ctx.backend, str(ctx.device)),
            files=run_files(cfg))
        self._next_epoch = 0
        self._started = False  # whether this run has written its record yet
        self.notes = RestartNotes(ctx, self.board.store, self.engine.steps_per_epoch)
        self.cadence = CheckpointCadence(
            ctx, cfg.run.checkpoint_every, cfg.run.checkpoint_steps,
            timed_seconds(cfg.run.checkpoint_every_s, max_restarts() > 0),
            mid_epoch=self.dims.sync.synchronous)

    @property
    def checkpoint_dir(self) -> Path:
        """Where checkpoints go: ``OUT/checkpoint``."""
        return self.out / CHECKPOINT_DIR

    @property
    def record_path(self) -> Path:
        """The JSON run record: ``OUT/record.json``."""
        return self.out / RECORD_FILE

    # ------------------------------------------------------------------ state
    def _position(self) -> dict[str, int]:
        """``{"epoch", "step"}`` of the next step."""
        return self.engine.position(self._next_epoch)

    def _save(self, partial: dict[str, float]) -> None:
        """Checkpoint (collective); ``partial``: this rank's sums of the unfinished epoch."""
        ctx = self.ctx
        per_rank: list[dict[str, float]] = []
        if partial and not self.dims.sync.synchronous:  # local SGD, mid-epoch
            average_model(self.engine.module, self.optimizer, ctx, self.stats)
        if partial:  # every rank's sums, so that each resumes with its own
            rows = torch.zeros(ctx.world_size, len(SUMS), dtype=torch.float64,
                               device=ctx.device)
            rows[ctx.rank] = torch.tensor([partial[k] for k in SUMS], dtype=torch.float64)
            per_rank = [dict(zip(SUMS, r, strict=True))
                        for r in all_reduce_sum(ctx, rows).cpu().tolist()]
        engine = self.engine.extra_state()
        position, now = self._position(), time.time()
        save_checkpoint(self.checkpoint_dir, ctx, self.trained, self.optimizer, extra={
            "position": position, "partial": per_rank, "epochs": self.record.epochs,
            "config": self.cfg.to_dict(), "engine": engine,
            "partition_digest": self.partition_digest, "saved_at": now})
        self.notes.saved(position, now)
        if ctx.is_main:  # the run that --overwrite replaced is no longer needed
            commit_replacement(self.out)
        self.cadence.saved()

    def _save_best(self, entry: dict[str, Any]) -> None:
        """Keep the weights of the best-valid evaluation in ``OUT/best`` (collective)."""
        save_checkpoint(self.out / BEST_DIR, self.ctx, self.trained, extra={
            "epoch": entry["epoch"], "config": self.cfg.to_dict(),
            "partition_digest": self.partition_digest})

    def _resume(self) -> dict[str, float]:
        """Restore the newest checkpoint; return the unfinished epoch's sums."""
        if not self.cfg.run.resume:
            return {}

        def check() -> None:
            check_resume(self.out, self.cfg, self.part_dir)
            saved = read_state(self.checkpoint_dir)["world_size"]
            if saved != self.ctx.world_size:
                raise ConfigError(f"the checkpoint was written by {saved} ranks, this run has "
                                  f"{self.ctx.world_size}.", path=self.checkpoint_dir,
                                  field="world_size",
                                  fix=f"resume with {saved} processes (--nproc {saved}).")

        agreed(self.ctx, check)
        extra = load_checkpoint(self.checkpoint_dir, self.ctx, self.trained, self.optimizer)
        pos = extra["position"]
        self.engine.restore(pos, extra.get("engine", {}))
        self._next_epoch = int(pos["epoch"])
        self.notes.resumed(pos, extra.get("saved_at"))
        self.record.epochs = list(extra["epochs"])
        if self.ctx.is_main:
            log.info("resumed from %s at epoch %d, step %d", self.checkpoint_dir,
                     pos["epoch"] + 1, pos["step"])
        partial: list[dict[str, float]] = extra["partial"]
        return partial[self.ctx.rank] if partial else {}

    def _note_restart(self) -> None:
        """Rank 0 of a restarted run: the restart in the record, and a line in the log."""
        entry = self.notes.restarted(self.record, self.cfg.run.resume)
        if entry is None:
            return
        self._write_record()
        where = ("from the start (no checkpoint yet)" if entry["resumed_from"] is None else
                 f"from epoch {entry['resumed_from']['epoch'] + 1}, step "
                 f"{entry['resumed_from']['step']}")
        log.warning("restart %d: %s; resumed %s, %s steps redone", entry["restart"],
                    entry["reason"], where,
                    "?" if entry["steps_redone"] is None else entry["steps_redone"])

    def _seed_step(self, epoch: int, step: int) -> None:
        torch.manual_seed(mix_int(self.cfg.train.seed, epoch, step, self.ctx.rank)
                          & ((1 << 63) - 1))

    def _write_record(self) -> None:
        if self.ctx.is_main:
            self.record.write(self.record_path)

    def _note_stale_outputs(self) -> None:
        """Keep listing what an earlier part of a resumed run wrote; warn of what goes stale."""
        if not self.cfg.run.resume:
            return
        try:
            previous = RunRecord.load(self.record_path)
        except ConfigError:
            previous = RunRecord(config={})
        before = previous.files
        self.record.files += [f for f in before if f not in self.record.files]
        self.record.restarts = previous.restarts
        if PREDICTIONS_DIR in before and not wants_outputs(self.cfg):
            log.warning("%s: written from an earlier checkpoint; this run does not write them "
                        "again (--save-predictions), so gnnpar.load_predictions will refuse "
                        "them as stale once it checkpoints.", self.out / PREDICTIONS_DIR)

    # ------------------------------------------------------------------ training
    def fit(self, hook: StepHook | None = None) -> dict[str, Any]:
        """Train for the configured epochs (resuming when asked), then infer (collective).

        Args:
            hook: Called after every optimizer step; an exception it raises stops the run
                (the newest checkpoint stays, for ``resume``).

        Returns:
            The run record's summary (:data:`~gnnpar.train.record.SUMMARY_FIELDS`), also
            written to :attr:`record_path` by rank 0.
        """
        try:
            with self.board.guard():  # a failed collective becomes an error naming its cause
                summary = self._fit(hook)
        except BaseException as exc:
            self.notes.failed(exc, self.record if self._started else None)  # for a restart
            if self._started:  # else the record on disk is an earlier run's: keep it
                self.record.status = "interrupted" if isinstance(
                    exc, KeyboardInterrupt) else "failed"
                try:
                    self._write_record()
                except OSError:
                    pass  # the record keeps its last state; the error matters more
            raise
        return summary

    def _fit(self, hook: StepHook | None) -> dict[str, Any]:
        ctx, t = self.ctx, self.cfg.train
        partial = self._resume()
        if ctx.is_main and self.startup:
            log.info("start-up: %s", format_startup(self.startup))
        self.record.status = "running"
        self._started = True
        if ctx.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            self._note_stale_outputs()
            self._write_record()  # the marker first: it lists every file the run writes
            # A file that repeats the run: --config OUT/config.json [--resume].
            doc = self.cfg.to_dict()
            doc["run"].update(resume=False, overwrite=False)
            write_json_atomic(self.out / CONFIG_FILE, doc)
        if restart_number(ctx):
            self._note_restart()
        self.cadence.saved()
        engine = self.engine
        run = self.cfg.run
        shown = run.progress and sys.stderr.isatty()  # rank 0's progress bar
        self.step_log = StepLog(ctx.is_main and (run.log_every > 0 or not shown),
                                run.log_every, open_metrics(run.metrics, self.out)
                                if ctx.is_main else None, engine.steps_per_epoch, t.epochs)
        try:
            return self._epochs(partial, hook)
        finally:
            self.step_log.close()

    def _epochs(self, partial: dict[str, float], hook: StepHook | None) -> dict[str, Any]:
        """Train the epochs from the position, then the final evaluation and outputs."""
        ctx, t, engine = self.ctx, self.cfg.train, self.engine
        best = BestValid.replay(self.record.epochs, self.cfg.data.task, t.early_stop,
                                t.min_epochs)
        for epoch in range(self._position()["epoch"], t.epochs):
            if best.exhausted:  # a resumed run that --early-stop had ended
                break
            if not partial:
                engine.start_epoch(epoch)
            self.stats.reset()
            cpu = time.process_time()
            sums = self._train_epoch(epoch, partial, hook)
            cpu = time.process_time() - cpu
            partial = {}
            self._next_epoch = epoch + 1
            if not self.dims.sync.synchronous:
                # Local SGD: one model again, for evaluation and the checkpoint.
                average_model(self.engine.module, self.optimizer, ctx, self.stats)
            totals = dict(zip(SUMS, all_reduce_sum(ctx, torch.tensor(
                [sums[k] for k in SUMS], dtype=torch.float64, device=ctx.device)).tolist(),
                strict=True))
            rank_wall, rank_cpu = per_rank(ctx, [sums["time"], cpu])
            train = [totals[k] for k in ("loss", "correct", "seeds", "edges", "time")]
            phases = {k: totals[f"t_{k}"] / ctx.world_size for k in PHASES}
            comm = comm_totals(self.stats, ctx)
            epoch_time = train[4] / ctx.world_size
            accuracy: dict[str, Any] = dict.fromkeys(EVAL_FIELDS)
            eval_time, eval_comm = None, {}
            last = epoch + 1 == t.epochs and not (self.link and t.eval == "none")
            if (epoch + 1) % t.eval_every == 0 or last:
                self.eval_stats.reset()
                t0 = time.perf_counter()
                with self.stats.redirect(self.eval_stats):
                    accuracy.update(engine.evaluate())
                eval_time = float(all_reduce_sum(ctx, torch.tensor(
                    [time.perf_counter() - t0], dtype=torch.float64, device=ctx.device))
                    ) / ctx.world_size
                eval_comm = comm_totals(self.eval_stats, ctx)
            sample = engine.sampled
            entry = self.record.add_epoch({
                "epoch": epoch, "train_loss": train[0] / train[2],
                "train_acc": train[1] / train[2], **accuracy, "epoch_time_s": epoch_time,
                "eval_time_s": eval_time, "sampled_edges": int(train[3]) if sample else None,
                "sampled_edges_per_s": train[3] / epoch_time if sample else None,
                "step_time_s": phases, "rank_time_s": {"wall": rank_wall, "cpu": rank_cpu},
                "comm": comm, "eval_comm": eval_comm})
            self._write_record()
            if best.update(entry) and self.cfg.run.save_best:
                self._save_best(entry)  # before the checkpoint that moves the run past it
            if self.cadence.after_epoch(epoch, t.epochs) or best.exhausted:
                self._save({})
            if ctx.is_main:
                self._log_epoch(entry)
                self.step_log.epoch(entry)
            if best.exhausted and best.entry is not None:
                if ctx.is_main:
                    log.info("early stop (--early-stop %d): no better %s than epoch %d's "
                             "%.4f in %d evaluations", t.early_stop, best.metric,
                             best.entry["epoch"] + 1, best.value, best.since)
                break
        self.eval_stats.reset()
        with self.stats.redirect(self.eval_stats):
            final = self._final_accuracy()
        eval_comm = comm_totals(self.eval_stats, ctx)
        if self.link and t.eval != "none" and self.record.epochs:  # the last epoch's
            eval_comm = self.record.epochs[-1]["eval_comm"]
        self.record.summary = self._summary(final, eval_comm, time.monotonic() - self.started,
                                            peak_memory(ctx, self._start_rss), best)
        self.step_log.final(self.record.summary)
        self.record.status = "complete"
        self._write_record()
        return self.record.summary

    def _train_epoch(self, epoch: int, partial: dict[str, float], hook: StepHook | None
                     ) -> dict[str, float]:
        """Run the rest of ``epoch`` from the engine's position (collective).

        ``partial``: this rank's sums so far (a resume mid-epoch).  Each step: re-seed
        dropout, the engine's forward pass and loss, backward (DDP all-reduces the
        gradients unless local SGD keeps them local), the optimizer, the engine's sparse
        update, local SGD's averages when due; a checkpoint when the cadence says.

        Returns:
            This rank's sums (:data:`~gnnpar.train.engine.SUMS`), read from the device
            once.
        """
        ctx, engine, ddp, optimizer = self.ctx, self.engine, self.ddp, self.optimizer
        sync = self.dims.sync
        steps = engine.steps_per_epoch
        acc = {**dict.fromkeys(SUMS, 0.0), **partial}
        start = engine.position(epoch)["step"]
        bar = tqdm(total=steps, initial=start, leave=False, unit="step",
                   desc=f"epoch {epoch + 1}/{self.cfg.train.epochs}",
                   disable=bars_off(ctx.is_main and self.cfg.run.progress and steps > 1))
        # On the device, so that a step does not wait for it; read once per epoch.
        loss_sum = torch.zeros((), dtype=torch.float64, device=ctx.device)
        correct = torch.zeros((), dtype=torch.float64, device=ctx.device)
        items, edges = 0.0, 0
        phase = dict.fromkeys(("forward", "backward", "optimizer"), 0.0)

        def totals() -> dict[str, float]:
            io = engine.io_seconds()
            return {**acc, "loss": acc["loss"] + float(loss_sum),
                    "correct": acc["correct"] + float(correct), "seeds": acc["seeds"] + items,
                    "edges": acc["edges"] + edges, "time": acc["time"] + time.perf_counter() - t0,
                    **{f"t_{k}": acc[f"t_{k}"] + v for k, v in (phase | io).items()}}

        ddp.train()
        t0 = time.perf_counter()
        for step, batch in engine.batches(epoch):
            t1 = time.perf_counter()
            self._seed_step(epoch, step)
            batch = batch.to(ctx.device) if batch is not None else None
            global_step = epoch * steps + step
            # Local SGD: this step's gradients stay on this rank (no DDP all-reduce).
            with cast(DistributedDataParallel, ddp).no_sync() if sync.local(global_step) \
                    else contextlib.nullcontext():
                out = engine.step(ddp, batch, epoch)
                t2 = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                out.objective.backward()  # type: ignore[no-untyped-call]
            t3 = time.perf_counter()
            optimizer.step()
            engine.after_step()
            if sync.averages_after(global_step):
                average_model(ddp, optimizer if sync.optimizer_state else None, ctx, self.stats)
            elif sync.group_averages_after(global_step):
                average_model(ddp, None, ctx, self.stats, self.dims.local)
            t4 = time.perf_counter()
            phase["forward"] += t2 - t1
            phase["backward"] += t3 - t2
            phase["optimizer"] += t4 - t3
            loss_sum += out.loss.detach()
            correct += out.correct
            items += out.items
            edges += out.edges
            self.step_log.step(epoch, step, out.loss, out.items, out.edges)
            bar.update()
            if not bar.disable and (step + 1) % POSTFIX_EVERY == 0:
                run_left = self.step_log.eta(epoch, step)[1]
                bar.set_postfix(loss=f"{float(loss_sum) / max(items, 1):.4f}",
                                run_left="?" if run_left is None else format_duration(run_left))
            self.notes.reached = global_step + 1
            if self.cadence.after_step(step, steps):
                self._save(totals())
            if hook is not None:
                hook(epoch, step, batch)
        bar.close()
        self.step_log.flush(epoch, steps - 1, line=False)
        return totals()

    def _final_accuracy(self) -> dict[str, Any]:
        """The run's final metrics as ``--eval`` asks (collective for ``full``).

        Link prediction evaluates exactly after the last epoch anyway: its figures.  With
        ``--save-predictions`` / ``--save-embeddings`` the exact inference also writes
        ``OUT/predictions`` (and runs whatever ``--eval`` says).
        """
        t = self.cfg.train
        final: dict[str, Any] = dict.fromkeys(("train_acc", "val_acc", "test_acc",
                                               *LINK_FIELDS))
        save = wants_outputs(self.cfg)
        engine = self.engine
        last = self.record.epochs[-1] if self.record.epochs else {}
        source = {"command": "gnnpar-train", "run": str(self.out),
                  "partition": self.partition_digest,
                  "checkpoint": checkpoint_digest(self.checkpoint_dir)
                  if self.ctx.is_main and save else None}
        if save and self.typed:
            write_typed_outputs(predictions_dir(self.out), self.cfg, engine, self.graph,
                                self.ctx, source)
        elif save and self.link:
            assert isinstance(self.trained, LinkModule)
            write_node_outputs(predictions_dir(self.out), self.cfg, self.trained.gnn,
                               self.graph, self.ctx, self.stats, logits=False, source=source)
        homogeneous = not self.link and not self.typed
        sampled = {**final, "val_acc": last.get("val_acc"), "test_acc": last.get("test_acc")}
        if not homogeneous or (t.eval != "full" and not save):
            if t.eval == "none":
                return final
            if self.link:
                return {**final, **{k: last.get(k) for k in LINK_FIELDS}}
            return sampled
        own = engine.exact_accuracy()
        if own is not None:
            return {**final, **own}
        flush_pipelines(engine.module)  # no stale halo exchange left in flight
        plan, x = engine.halo_plan, engine.input_rows()
        budget = int(t.eval_budget_mb * 2**20)
        if save:
            exact = write_node_outputs(predictions_dir(self.out), self.cfg, self.model,
                                       self.graph, self.ctx, self.stats, plan, x,
                                       source=source)
        else:
            exact = full_neighbour_accuracy(self.model, self.graph, self.ctx,
                                            self.split_sizes, self.stats, t.precision,
                                            budget, plan, x)
        return {"full": {**final, **(exact or {})}, "sampled": sampled, "none": final}[t.eval]

    def _log_epoch(self, entry: dict[str, Any]) -> None:
        t = self.cfg.train
        accuracy = "" if entry["val_acc"] is None else (
            f", val {entry['val_acc']:.4f} test {entry['test_acc']:.4f}"
            f"{' (sampled)' if t.mode == 'sample' else ''}")
        if entry["test_hits"] is not None:
            metric, value = (("MRR", entry["test_mrr"]) if entry["test_mrr"] is not None
                             else next(iter(entry["test_hits"].items())))
            val = entry["val_mrr"] if entry["val_mrr"] is not None else (
                (entry["val_hits"] or {}).get(metric))
            accuracy = (f", val {metric} {val:.4f}" if val is not None else "") + \
                f", test {metric} {value:.4f}"
        rate = ("" if entry["sampled_edges_per_s"] is None
                else f", {entry['sampled_edges_per_s'] / 1e6:.3g}M sampled edges/s")
        run_left = self.step_log.eta(entry["epoch"], self.engine.steps_per_epoch - 1)[1]
        eta = format_eta(None, run_left) if entry["epoch"] + 1 < t.epochs else ""
        log.info("epoch %d/%d: loss %.4f, train accuracy %.4f%s, %.2f s%s%s",
                 entry["epoch"] + 1, t.epochs, entry["train_loss"], entry["train_acc"], accuracy,
                 entry["epoch_time_s"], rate, eta)

    def _summary(self, final: dict[str, float | None], eval_comm: dict[str, dict[str, int]],
                 wall: float, memory: dict[str, int | None], best: BestValid
                 ) -> dict[str, Any]:
        epochs = self.record.epochs
        steady = epochs[1:] if len(epochs) > 1 else epochs  # the first one warms up
        n = max(len(steady), 1)
        last = epochs[-1] if epochs else {}
        sample = self.cfg.train.mode == "sample"
        kinds = sorted({k for e in steady for k in e["comm"]})
        return {
            "task": self.cfg.data.task,
            "mode": self.cfg.train.mode,
            "eval": self.cfg.train.eval,
            "epochs": len(epochs),
            "steps_per_epoch": self.engine.steps_per_epoch,
            **final,
            "best": best.summary(str(self.out / BEST_DIR) if self.cfg.run.save_best
                                 else None),
            "stopped_early": len(epochs) < self.cfg.train.epochs and best.exhausted,
            "val_acc_sampled": last.get("val_acc") if sample else None,
            "test_acc_sampled": last.get("test_acc") if sample else None,
            "epoch_time_s": _mean([e["epoch_time_s"] for e in steady]),
            "sampled_edges_per_s": _mean([e["sampled_edges_per_s"] for e in steady]),
            "step_time_s": {k: _mean([e["step_time_s"][k] for e in steady]) for k in PHASES},
            "comm_per_epoch": {k: {f: sum(e["comm"].get(k, {}).get(f, 0) for e in steady) // n
                                   for f in ("rows", "bytes")} for k in kinds},
            "eval_comm": eval_comm,
            "wall_time_s": wall,
            "teardown_s": None,  # the command that started the Trainer measures it
            "startup_s": self.startup,
            "predictions": str(predictions_dir(self.out)) if wants_outputs(self.cfg) else None,
            "peak_memory_bytes": memory,
            "record": str(self.record_path),
        }
