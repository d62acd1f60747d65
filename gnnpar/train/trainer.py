"""``Trainer``: one training loop for every mode, one part per rank.

torchtitan's ``train.py`` shape.  Each rank loads its part
(:class:`~gnnpar.storage.graph.DistGraph`); :func:`~gnnpar.train.engines.build_engine`
builds the same model on every rank (same seed) and the engine of the run's task and mode
(:data:`~gnnpar.train.engines.ENGINES`), and the model is wrapped in
``DistributedDataParallel`` — the one gradient synchronisation of every mode but the
grid's.  One loop (:meth:`Trainer._train_epoch`) runs every mode's steps: the engine
(:class:`~gnnpar.train.engine.Engine`) supplies the batches and each one's forward pass
and loss; the loop asks what an engine does, never which one it is:

* ``sample`` — :class:`~gnnpar.train.minibatch.MinibatchEngine`: minibatches of sampled
  neighbourhoods, validation and test accuracy on sampled neighbourhoods;
* ``full`` — :class:`~gnnpar.train.fullgraph.FullGraphEngine`: one exact (or BNS /
  stale) whole-graph step per epoch, exact evaluation; with ``full.grid``,
  :class:`~gnnpar.train.grid.GridEngine`, the same on 3D-parallel layers (no DDP: the
  layers' collectives synchronise the sharded weights);
* ``--task link`` — :class:`~gnnpar.train.link.LinkEngine`: minibatches seeded by the
  training supervision edges, with negatives; exact MRR / Hits@K evaluation;
* typed graphs — :class:`~gnnpar.train.typed.TypedEngine`: typed minibatches.

The process groups are one :class:`~gnnpar.parallel_dims.ParallelDims`, handed to the
engine.  Two components do the rest: the run log (:class:`~gnnpar.train.runlog.RunLog`:
per epoch, rank 0 appends the epoch to the run record ``OUT/record.json`` — loss,
accuracies, epoch time, rows and bytes by kind, training steps and evaluation counted
apart — and logs it) and the checkpointer (:class:`~gnnpar.train.checkpointer.Checkpointer`:
every rank takes part in a checkpoint of the model, the optimizer and the engine's
position in ``OUT/checkpoint``, every ``checkpoint_every`` epochs, in sample mode every
``checkpoint_steps`` steps, and every ``checkpoint_every_s`` seconds).  ``resume``
continues from it with the same batches as an uninterrupted run, and refuses other
settings (:func:`~gnnpar.train.rundir.check_resume`).  Under a launcher that restarts its
workers (:mod:`gnnpar.train.elastic`), every rank that fails notes why in the launcher's
store, and a restarted rank 0 records the restart in the run record.
Every evaluation is also compared by its validation figure (:mod:`gnnpar.train.best`, as
OGB's protocol selects a model): the best one's figures head the summary, beside the last
epoch's, its weights go to ``OUT/best`` (``--save-best``), and ``--early-stop P`` ends the
run after ``P`` evaluations without a better one.
Dropout is re-seeded per step from ``(seed, epoch, step, rank)``, so like the sampler it
carries no state a checkpoint would have to hold.

At the end the engine gives the final figures (:meth:`~gnnpar.train.engine.Engine.final_metrics`)
as ``--eval`` asks: **full-neighbour inference** (the default but on typed graphs, whose
``auto`` is ``sampled``: :meth:`~gnnpar.train.config.Config.for_graph`) runs the trained
layers on the whole partitioned graph exactly as the same PyG model on the whole graph
would — layer by layer, one halo exchange per layer, each layer in chunks of owned nodes
under ``--eval-budget-mb`` (:mod:`gnnpar.nn.inference`) — or the last sampled evaluation
is reported as final (``sampled``), or nothing (``none``); the summary's ``eval`` says
which.
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
import time
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from gnnpar.comm import CommStats, all_reduce_sum, comm_totals, count_gradients, per_rank
from gnnpar.console import bars_off, format_duration
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.faults import FailureBoard, agreed
from gnnpar.keys import mix_int
from gnnpar.nn.grid import parse_grid
from gnnpar.parallel_dims import ParallelDims
from gnnpar.partition.format import content_digest
from gnnpar.sizes import rss_bytes
from gnnpar.storage.graph import DistGraph, global_split_sizes
from gnnpar.train.best import BestValid
from gnnpar.train.checkpoint import checkpoint_digest
from gnnpar.train.checkpointer import Checkpointer
from gnnpar.train.config import Config
from gnnpar.train.elastic import RestartNotes
from gnnpar.train.engine import EVAL_FIELDS, PHASES, SUMS, Step, StepHook
from gnnpar.train.engines import build_engine
from gnnpar.train.outputs import predictions_dir, wants_outputs
from gnnpar.train.prepare import check_graph_settings, startup_timeout
from gnnpar.train.record import RunRecord
from gnnpar.train.rundir import check_run_dir
from gnnpar.train.runlog import RunLog, peak_memory
from gnnpar.train.sync import average_model

log = logging.getLogger("gnnpar")

STEP_HOST_SYNCS = 0
"""Host reads of a training step (forward, backward, optimiser): none; the epoch's sums
are read once at its end (and every :data:`POSTFIX_EVERY` steps for a progress bar, and
on rank 0 once per log line or scalar flush, :class:`~gnnpar.train.metrics.StepLog`:
every ``--log-every`` steps, by default about every 10 s)."""
POSTFIX_EVERY = 20
"""Steps between updates of the progress bar's loss (each one waits for the device)."""


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
        dims: The run's process groups, built once here and kept by the engine.
        engine: The run's :class:`~gnnpar.train.engine.Engine`.
        trained: What the optimizer steps and checkpoints hold (``ddp`` wraps
            ``engine.module``).
        stats: Communication counters of the training steps (reset each epoch).
        eval_stats: Counters of the evaluations.
        checkpointer: The run's checkpoints.
        runlog: The run record (written by rank 0), the step log, the summary.
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
        self.ctx, self.out, self.part_dir = ctx, Path(cfg.run.out), str(part_dir)
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
        ctx, graph, meta = self.ctx, self.graph, self.graph.meta
        self.cfg = cfg = self.cfg.for_graph(meta.types is not None)
        self.partition_digest = content_digest(self.part_dir)  # what checkpoints bind to
        self.split_sizes = global_split_sizes(graph, ctx, cfg.data.task)
        self.stats, self.eval_stats = CommStats(), CommStats()
        check_graph_settings(cfg, self.part_dir, meta.types.layout if meta.types else None,
                             meta.feat_dim, meta.num_classes)
        self.sync = cfg.train.local_sgd()
        grid = cfg.full.grid if cfg.train.mode == "full" else None
        self.dims = ParallelDims(ctx, local=self.sync.group_size,
                                 grid=None if grid is None else parse_grid(grid))
        self.trained, self.engine = build_engine(cfg, graph, self.dims, self.split_sizes,
                                                 self.stats)
        self.ddp: nn.Module
        if self.engine.replicated:
            data = self.dims.get_group("data")
            self.ddp = DistributedDataParallel(self.engine.module, process_group=data)
            count_gradients(self.ddp, self.stats, ctx.world_size, data)
        else:  # sharded weights, synchronised by the layers
            self.trained = self.ddp = self.engine.module
        self.optimizer = torch.optim.Adam(self.trained.parameters(), lr=cfg.train.lr,
                                          weight_decay=cfg.train.weight_decay)
        self.notes = RestartNotes(ctx, self.board.store, self.engine.steps_per_epoch)
        self.runlog = RunLog(cfg, self.out, self.part_dir, graph, ctx, self.notes,
                             self.startup, self.engine.steps_per_epoch)
        self.checkpointer = Checkpointer(cfg, self.out, self.part_dir, self.partition_digest,
                                         ctx, self.trained, self.optimizer, self.engine,
                                         self.sync, self.notes, self.stats)

    @property
    def record(self) -> RunRecord:
        """The run record (rank 0 writes it to ``OUT/record.json``)."""
        return self.runlog.record

    def fit(self, hook: StepHook | None = None) -> dict[str, Any]:
        """Train for the configured epochs (resuming when asked), then infer (collective).

        Args:
            hook: Called after every optimizer step; an exception it raises stops the run
                (the newest checkpoint stays, for ``resume``).

        Returns:
            The run record's summary (:data:`~gnnpar.train.record.SUMMARY_FIELDS`), also
            written to ``OUT/record.json`` by rank 0.
        """
        try:
            with self.board.guard():  # a failed collective becomes an error naming its cause
                start, self.record.epochs, partial = self.checkpointer.restore()
                self.runlog.start()
                self.checkpointer.start()
                try:
                    return self._epochs(start, partial, hook)
                finally:
                    self.runlog.close()
        except BaseException as exc:
            self.runlog.failed(exc)
            raise

    def _epochs(self, start: int, partial: dict[str, float], hook: StepHook | None
                ) -> dict[str, Any]:
        """Train the epochs from ``start``, then the final figures and outputs."""
        t, engine, task = self.cfg.train, self.engine, self.cfg.data.task
        best = BestValid.replay(self.record.epochs, task, t.early_stop, t.min_epochs)
        for epoch in range(start, t.epochs):
            if best.exhausted:  # a resumed run that --early-stop had ended
                break
            if not partial:
                engine.start_epoch(epoch)
            self.stats.reset()
            cpu = time.process_time()
            sums = self._train_epoch(epoch, partial, hook)
            cpu, partial = time.process_time() - cpu, {}
            if not self.sync.synchronous:  # local SGD: one model again, for what follows
                average_model(engine.module, self.optimizer, self.ctx, self.stats)
            last = epoch + 1 == t.epochs and not (task == "link" and t.eval == "none")
            evaluate = (epoch + 1) % t.eval_every == 0 or last
            entry = self.runlog.add_epoch(self._epoch_entry(epoch, sums, cpu, evaluate))
            if best.update(entry) and self.cfg.run.save_best:
                self.checkpointer.save_best(entry)  # before the checkpoint that passes it
            self.checkpointer.after_epoch(epoch, self.record.epochs, best.exhausted)
            self.runlog.show_epoch(entry)
            if best.exhausted and best.entry is not None:
                if self.ctx.is_main:
                    log.info("early stop (--early-stop %d): no better %s than epoch %d's "
                             "%.4f in %d evaluations", t.early_stop, best.metric,
                             best.entry["epoch"] + 1, best.value, best.since)
                break
        return self._finish(best)

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
        ctx, engine, ddp, optimizer, sync = (self.ctx, self.engine, self.ddp, self.optimizer,
                                             self.sync)
        steps, steps_log = engine.steps_per_epoch, self.runlog.steps
        bar = tqdm(total=steps, initial=engine.position(epoch)["step"], leave=False,
                   unit="step", desc=f"epoch {epoch + 1}/{self.cfg.train.epochs}",
                   disable=bars_off(ctx.is_main and self.cfg.run.progress and steps > 1))
        ddp.train()
        sums = EpochSums(partial, ctx.device)  # on the device: a step does not wait for it
        for step, batch in engine.batches(epoch):
            t1 = time.perf_counter()
            torch.manual_seed(mix_int(self.cfg.train.seed, epoch, step, ctx.rank)
                              & ((1 << 63) - 1))
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
                average_model(ddp, None, ctx, self.stats, self.dims.get_group("local"))
            sums.add(out, t2 - t1, t3 - t2, time.perf_counter() - t3)
            steps_log.step(epoch, step, out.loss, out.items, out.edges)
            bar.update()
            if not bar.disable and (step + 1) % POSTFIX_EVERY == 0:
                run_left = steps_log.eta(epoch, step)[1]
                bar.set_postfix(loss=f"{sums.mean_loss():.4f}",
                                run_left="?" if run_left is None else format_duration(run_left))
            self.notes.reached = global_step + 1
            self.checkpointer.after_step(step, epoch, self.record.epochs,
                                         lambda: sums.totals(engine.io_seconds()))
            if hook is not None:
                hook(epoch, step, batch)
        bar.close()
        steps_log.flush(epoch, steps - 1, line=False)
        return sums.totals(engine.io_seconds())

    def _epoch_entry(self, epoch: int, sums: dict[str, float], cpu: float, evaluate: bool
                     ) -> dict[str, Any]:
        """The epoch's record entry: every rank's sums, then the evaluation (collective)."""
        ctx = self.ctx
        total = dict(zip(SUMS, all_reduce_sum(ctx, torch.tensor(
            [sums[k] for k in SUMS], dtype=torch.float64, device=ctx.device)).tolist(),
            strict=True))
        rank_wall, rank_cpu = per_rank(ctx, [sums["time"], cpu])
        comm = comm_totals(self.stats, ctx)
        epoch_time = total["time"] / ctx.world_size
        figures: dict[str, Any] = dict.fromkeys(EVAL_FIELDS)
        eval_time, eval_comm = None, {}
        if evaluate:
            self.eval_stats.reset()
            t0 = time.perf_counter()
            with self.stats.redirect(self.eval_stats):
                figures.update(self.engine.evaluate())
            eval_time = float(all_reduce_sum(ctx, torch.tensor(
                [time.perf_counter() - t0], dtype=torch.float64, device=ctx.device))
                ) / ctx.world_size
            eval_comm = comm_totals(self.eval_stats, ctx)
        sample = self.cfg.train.mode == "sample"
        return {"epoch": epoch, "train_loss": total["loss"] / total["seeds"],
                "train_acc": total["correct"] / total["seeds"], **figures,
                "epoch_time_s": epoch_time, "eval_time_s": eval_time,
                "sampled_edges": int(total["edges"]) if sample else None,
                "sampled_edges_per_s": total["edges"] / epoch_time if sample else None,
                "step_time_s": {k: total[f"t_{k}"] / ctx.world_size for k in PHASES},
                "rank_time_s": {"wall": rank_wall, "cpu": rank_cpu}, "comm": comm,
                "eval_comm": eval_comm}

    def _finish(self, best: BestValid) -> dict[str, Any]:
        """The engine's final figures and outputs, then the summary (collective)."""
        ctx, t, epochs = self.ctx, self.cfg.train, self.record.epochs
        outputs = predictions_dir(self.out) if wants_outputs(self.cfg) else None
        source = {"command": "gnnpar-train", "run": str(self.out),
                  "partition": self.partition_digest,
                  "checkpoint": checkpoint_digest(self.checkpointer.dir)
                  if ctx.is_main and outputs is not None else None}
        self.eval_stats.reset()
        with self.stats.redirect(self.eval_stats):
            final = self.engine.final_metrics(epochs[-1] if epochs else {}, outputs, source)
        eval_comm = comm_totals(self.eval_stats, ctx)
        if self.cfg.data.task == "link" and t.eval != "none" and epochs:  # its last evaluation
            eval_comm = epochs[-1]["eval_comm"]
        return self.runlog.finish(final, eval_comm, time.monotonic() - self.started,
                                  peak_memory(ctx, self._start_rss), best)


class EpochSums:
    """This rank's sums of an epoch's steps (:data:`~gnnpar.train.engine.SUMS`).

    The loss and the correct count stay on the device (a step never waits for them)
    until :meth:`totals` reads them.

    Args:
        partial: The sums of the epoch's steps before a resume (``{}``: none).
        device: The run's device.
    """

    def __init__(self, partial: dict[str, float], device: torch.device) -> None:
        self.before = {**dict.fromkeys(SUMS, 0.0), **partial}
        self.loss = torch.zeros((), dtype=torch.float64, device=device)
        self.correct = torch.zeros((), dtype=torch.float64, device=device)
        self.items, self.edges = 0.0, 0
        self.phase = dict.fromkeys(("forward", "backward", "optimizer"), 0.0)
        self.start = time.perf_counter()

    def add(self, out: Step, forward: float, backward: float, optimizer: float) -> None:
        """Add a step's figures and the seconds of its phases."""
        self.phase["forward"] += forward
        self.phase["backward"] += backward
        self.phase["optimizer"] += optimizer
        self.loss += out.loss.detach()
        self.correct += out.correct
        self.items += out.items
        self.edges += out.edges

    def mean_loss(self) -> float:
        """The mean loss of the epoch's steps since this start (one device read)."""
        return float(self.loss) / max(self.items, 1)

    def totals(self, io: dict[str, float]) -> dict[str, float]:
        """The sums so far, with the engine's ``io`` seconds (two device reads)."""
        b = self.before
        return {**b, "loss": b["loss"] + float(self.loss),
                "correct": b["correct"] + float(self.correct), "seeds": b["seeds"] + self.items,
                "edges": b["edges"] + self.edges,
                "time": b["time"] + time.perf_counter() - self.start,
                **{f"t_{k}": b[f"t_{k}"] + v for k, v in (self.phase | io).items()}}
