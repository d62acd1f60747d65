"""What a run tells: its record, its log lines and scalars, its summary.

torchtitan's ``MetricsProcessor`` shape: the loop hands :class:`RunLog` each step's loss
and each epoch's figures, and it keeps the run record ``OUT/record.json``
(:mod:`gnnpar.train.record`, written by rank 0 at the start, after every epoch and at the
end), the log lines and ``--metrics`` scalars (:class:`~gnnpar.train.metrics.StepLog`),
and the final summary (:data:`~gnnpar.train.record.SUMMARY_FIELDS`).  At the start it
also writes ``OUT/config.json`` (the file that repeats the run) and, on a restarted
rank 0, the restart's entry.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import torch

from gnnpar.artifacts.files import write_json_atomic
from gnnpar.artifacts.kinds import BEST_DIR, CONFIG_FILE, PREDICTIONS_DIR, RECORD_FILE
from gnnpar.comm import all_gather_ints
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.sizes import peak_rss_bytes
from gnnpar.storage.graph import DistGraph
from gnnpar.train.best import BestValid
from gnnpar.train.config import Config
from gnnpar.train.elastic import RestartNotes, restart_number
from gnnpar.train.engine import PHASES
from gnnpar.train.metrics import StepLog, format_eta, open_metrics
from gnnpar.train.outputs import predictions_dir, wants_outputs
from gnnpar.train.record import RunRecord, format_startup
from gnnpar.train.rundir import run_files

log = logging.getLogger("gnnpar")


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


class RunLog:
    """The run record, the step log and the summary of one run (rank 0 writes).

    Args:
        cfg: The run's configuration.
        out: The run directory.
        part_dir: The partition directory.
        graph: This rank's part (the record's ``partition``).
        ctx: Distributed context.
        notes: The run's restart notes (a restarted rank 0 records the restart).
        startup: Seconds of the command's start-up phases (shown, and in the summary).
        steps_per_epoch: The engine's steps per epoch.

    Attributes:
        record: The run record.
        steps: The step log (from :meth:`start` to :meth:`close`).
        started: Whether this run has written its record yet.
    """

    steps: StepLog

    def __init__(self, cfg: Config, out: Path, part_dir: str, graph: DistGraph,
                 ctx: DistContext, notes: RestartNotes, startup: dict[str, float],
                 steps_per_epoch: int) -> None:
        self.cfg, self.out, self.ctx, self.notes = cfg, out, ctx, notes
        self.startup, self.steps_per_epoch = startup, steps_per_epoch
        meta = graph.meta
        self.record = RunRecord(
            config=cfg.to_dict(),
            partition={"dir": part_dir, "name": meta.name, "num_parts": meta.num_parts,
                       "num_nodes": meta.num_nodes, "num_edges": meta.num_edges,
                       "feat_dim": meta.feat_dim, "feature_dtype": meta.feature_dtype,
                       "num_classes": meta.num_classes,
                       "partitioner": meta.partitioner.get("method"),
                       "node_types": list(meta.types.layout.node_types) if meta.types
                       else None},
            env=RunRecord.environment(ctx.world_size, ctx.backend, str(ctx.device)),
            files=run_files(cfg))
        self.started = False

    @property
    def path(self) -> Path:
        """The JSON run record: ``OUT/record.json``."""
        return self.out / RECORD_FILE

    def write(self) -> None:
        """Write the record (rank 0; the others return)."""
        if self.ctx.is_main:
            self.record.write(self.path)

    def start(self) -> None:
        """Training starts (after a resume): the record, ``OUT/config.json``, the step log."""
        ctx, run = self.ctx, self.cfg.run
        if ctx.is_main and self.startup:
            log.info("start-up: %s", format_startup(self.startup))
        self.record.status = "running"
        self.started = True
        if ctx.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            self._note_stale_outputs()
            self.write()  # the marker first: it lists every file the run writes
            # A file that repeats the run: --config OUT/config.json [--resume].
            doc = self.cfg.to_dict()
            doc["run"].update(resume=False, overwrite=False)
            write_json_atomic(self.out / CONFIG_FILE, doc)
        if restart_number(ctx):
            self._note_restart()
        shown = run.progress and sys.stderr.isatty()  # rank 0's progress bar
        self.steps = StepLog(ctx.is_main and (run.log_every > 0 or not shown), run.log_every,
                             open_metrics(run.metrics, self.out) if ctx.is_main else None,
                             self.steps_per_epoch, self.cfg.train.epochs)

    def add_epoch(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Record an epoch's figures (and write the record); returns its entry."""
        entry = self.record.add_epoch(fields)
        self.write()
        return entry

    def show_epoch(self, entry: dict[str, Any]) -> None:
        """Rank 0: the epoch's log line and scalars."""
        if not self.ctx.is_main:
            return
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
        run_left = self.steps.eta(entry["epoch"], self.steps_per_epoch - 1)[1]
        eta = format_eta(None, run_left) if entry["epoch"] + 1 < t.epochs else ""
        log.info("epoch %d/%d: loss %.4f, train accuracy %.4f%s, %.2f s%s%s",
                 entry["epoch"] + 1, t.epochs, entry["train_loss"], entry["train_acc"], accuracy,
                 entry["epoch_time_s"], rate, eta)
        self.steps.epoch(entry)

    def finish(self, final: dict[str, Any], eval_comm: dict[str, dict[str, int]],
               wall: float, memory: dict[str, int | None], best: BestValid
               ) -> dict[str, Any]:
        """The run is complete: its summary, recorded and written; returns it."""
        self.record.summary = self._summary(final, eval_comm, wall, memory, best)
        self.steps.final(self.record.summary)
        self.record.status = "complete"
        self.write()
        return self.record.summary

    def failed(self, exc: BaseException) -> None:
        """The run stops on ``exc``: the record says so (once this run has written it)."""
        self.notes.failed(exc, self.record if self.started else None)  # for a restart
        if not self.started:  # the record on disk is an earlier run's: keep it
            return
        self.record.status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        try:
            self.write()
        except OSError:
            pass  # the record keeps its last state; the error matters more

    def close(self) -> None:
        """Release the step log's writer."""
        self.steps.close()

    def _note_restart(self) -> None:
        """Rank 0 of a restarted run: the restart in the record, and a line in the log."""
        entry = self.notes.restarted(self.record, self.cfg.run.resume)
        if entry is None:
            return
        self.write()
        where = ("from the start (no checkpoint yet)" if entry["resumed_from"] is None else
                 f"from epoch {entry['resumed_from']['epoch'] + 1}, step "
                 f"{entry['resumed_from']['step']}")
        log.warning("restart %d: %s; resumed %s, %s steps redone", entry["restart"],
                    entry["reason"], where,
                    "?" if entry["steps_redone"] is None else entry["steps_redone"])

    def _note_stale_outputs(self) -> None:
        """Keep listing what an earlier part of a resumed run wrote; warn of what goes stale."""
        if not self.cfg.run.resume:
            return
        try:
            previous = RunRecord.load(self.path)
        except ConfigError:
            previous = RunRecord(config={})
        before = previous.files
        self.record.files += [f for f in before if f not in self.record.files]
        self.record.restarts = previous.restarts
        if PREDICTIONS_DIR in before and not wants_outputs(self.cfg):
            log.warning("%s: written from an earlier checkpoint; this run does not write them "
                        "again (--save-predictions), so gnnpar.load_predictions will refuse "
                        "them as stale once it checkpoints.", self.out / PREDICTIONS_DIR)

    def _summary(self, final: dict[str, Any], eval_comm: dict[str, dict[str, int]],
                 wall: float, memory: dict[str, int | None], best: BestValid
                 ) -> dict[str, Any]:
        cfg, epochs = self.cfg, self.record.epochs
        steady = epochs[1:] if len(epochs) > 1 else epochs  # the first one warms up
        n = max(len(steady), 1)
        last = epochs[-1] if epochs else {}
        sample = cfg.train.mode == "sample"
        kinds = sorted({k for e in steady for k in e["comm"]})
        return {
            "task": cfg.data.task,
            "mode": cfg.train.mode,
            "eval": cfg.train.eval,
            "epochs": len(epochs),
            "steps_per_epoch": self.steps_per_epoch,
            **final,
            "best": best.summary(str(self.out / BEST_DIR) if cfg.run.save_best else None),
            "stopped_early": len(epochs) < cfg.train.epochs and best.exhausted,
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
            "predictions": str(predictions_dir(self.out)) if wants_outputs(cfg) else None,
            "peak_memory_bytes": memory,
            "record": str(self.path),
        }
