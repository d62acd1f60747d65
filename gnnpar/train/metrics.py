"""What a run shows while it trains: a log line per interval and a stream of scalars.

Rank 0 only.  Without a terminal (``nohup``, Slurm, CI) no progress bar is drawn, so
:class:`StepLog` logs a line every ``--log-every`` steps, or about every
:data:`LOG_INTERVAL_S` seconds of training by default: the epoch and step, rank 0's mean
loss since the last line and its throughput.  With ``--metrics csv|tensorboard`` the
same steps' losses and each epoch's figures go to a :class:`MetricsWriter` as they
happen, and the final full-neighbour accuracies (``final/train_acc``, ``final/val_acc``,
``final/test_acc``) at the last step: ``OUT/metrics.csv`` (``tag,step,value,wall_time``
rows, always available) or ``OUT/tensorboard`` (``torch.utils.tensorboard``, ``pip
install 'gnnpar[tensorboard]'``).  The log lines give the time left in the epoch and in
the run (ETA).

The x-axis of every scalar is the global step (``epoch * steps_per_epoch + step + 1``,
optimizer steps so far); an epoch's figures sit at its last step.  A training step
reads nothing from the device for this: each step's loss stays on the device until the
next line or the epoch's end, then all of them are read at once.
"""

from __future__ import annotations

import csv
import logging
import os
import time
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from gnnpar.artifacts.kinds import METRICS_CSV as CSV_FILE
from gnnpar.artifacts.kinds import TENSORBOARD_DIR
from gnnpar.console import format_duration
from gnnpar.errors import ConfigError

log = logging.getLogger("gnnpar")
LOG_INTERVAL_S = 10.0
"""Seconds of training between two log lines when ``--log-every`` is 0."""


class MetricsWriter(Protocol):
    """Where scalars go (rank 0)."""

    def add(self, tag: str, value: float, step: int) -> None:
        """Record ``value`` of ``tag`` at global step ``step``."""

    def flush(self) -> None:
        """Make what was added readable (on disk)."""

    def close(self) -> None:
        """Flush and release the file."""


class CsvMetrics:
    """Scalars appended to ``OUT/metrics.csv``: ``tag,step,value,wall_time`` rows.

    A resumed run appends to the same file (its header is written once).
    """

    def __init__(self, out: Path) -> None:
        self.path = out / CSV_FILE
        new = not self.path.is_file()
        self._file = open(self.path, "a", newline="")  # noqa: SIM115 - closed in close()
        self._csv = csv.writer(self._file)
        if new:
            self._csv.writerow(["tag", "step", "value", "wall_time"])

    def add(self, tag: str, value: float, step: int) -> None:  # noqa: D102
        self._csv.writerow([tag, step, repr(float(value)), f"{time.time():.3f}"])

    def flush(self) -> None:  # noqa: D102
        self._file.flush()

    def close(self) -> None:  # noqa: D102
        self._file.close()


class TensorBoardMetrics:
    """Scalars as TensorBoard events in ``OUT/tensorboard`` (``SummaryWriter``)."""

    def __init__(self, out: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise ConfigError(f"TensorBoard is not installed ({exc}).", field="run.metrics",
                              fix="pip install 'gnnpar[tensorboard]', or pass --metrics "
                              "csv.") from None
        self._writer = SummaryWriter(log_dir=str(out / TENSORBOARD_DIR))

    def add(self, tag: str, value: float, step: int) -> None:  # noqa: D102
        self._writer.add_scalar(tag, value, step)

    def flush(self) -> None:  # noqa: D102
        self._writer.flush()

    def close(self) -> None:  # noqa: D102
        self._writer.close()


def check_metrics(kind: str | None) -> None:
    """Refuse ``--metrics tensorboard`` without TensorBoard, before any work starts."""
    if kind == "tensorboard":
        import importlib.util

        if importlib.util.find_spec("tensorboard") is None:
            raise ConfigError("--metrics tensorboard, but the tensorboard package is not "
                              "installed.", field="run.metrics",
                              fix="pip install 'gnnpar[tensorboard]', or pass --metrics csv.")


def open_metrics(kind: str | None, out: Path) -> MetricsWriter | None:
    """The writer of ``--metrics`` (``None``: none), in the run directory ``out``."""
    if kind is None:
        return None
    out.mkdir(parents=True, exist_ok=True)
    return CsvMetrics(out) if kind == "csv" else TensorBoardMetrics(out)


def read_csv_metrics(path: str | os.PathLike[str]) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of a run's ``metrics.csv`` (or its run directory)."""
    p = Path(path)
    p = p / CSV_FILE if p.is_dir() else p
    out: dict[str, list[tuple[int, float]]] = {}
    line = 1
    try:
        with open(p, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                line += 1
                out.setdefault(row["tag"], []).append((int(row["step"]), float(row["value"])))
    except (OSError, UnicodeDecodeError, KeyError, TypeError, ValueError, csv.Error) as exc:
        raise ConfigError(f"line {line} is not a tag,step,value,wall_time row "
                          f"({type(exc).__name__}: {str(exc)[:120]}).", path=p,
                          field="metrics", fix="read the metrics.csv of a gnnpar-train "
                          "run (--metrics csv) as it wrote it.") from None
    return out


EPOCH_SCALARS = {"train/loss": "train_loss", "train/acc": "train_acc", "val/acc": "val_acc",
                 "test/acc": "test_acc", "val/mrr": "val_mrr", "test/mrr": "test_mrr",
                 "time/epoch_s": "epoch_time_s", "time/eval_s": "eval_time_s",
                 "throughput/sampled_edges_per_s": "sampled_edges_per_s"}
"""The scalars of each epoch: tag -> the run record's epoch field."""
FINAL_SCALARS = ("train_acc", "val_acc", "test_acc")
"""The summary's final full-neighbour figures, written as ``final/KEY`` at the last step."""


def format_eta(epoch: float | None, run: float | None) -> str:
    """``"; ETA epoch 12 s, run 3 min 05 s"`` (the known parts; ``""`` when neither)."""
    parts = [f"{what} {format_duration(s)}" for what, s in (("epoch", epoch), ("run", run))
             if s is not None]
    return f"; ETA {', '.join(parts)}" if parts else ""


class StepLog:
    """Rank 0's lines and per-step scalars (see the module docstring); inert elsewhere.

    Args:
        lines: Log a line per interval (no progress bar is shown, or ``--log-every``).
        every: Steps between lines (0: every :data:`LOG_INTERVAL_S` seconds).
        writer: Where scalars go, if anywhere.
        steps_per_epoch: Steps of an epoch (the global step's unit).
        epochs: Epochs of the run (for the lines).
    """

    def __init__(self, lines: bool, every: int, writer: MetricsWriter | None,
                 steps_per_epoch: int, epochs: int) -> None:
        self.lines, self.every, self.writer = lines, every, writer
        self.steps_per_epoch, self.epochs = steps_per_epoch, epochs
        self._pending: list[tuple[int, Tensor, float]] = []
        self._since = self._started = time.perf_counter()
        self._steps = self._edges = 0
        self._first: int | None = None  # global steps done when this run (or resume) began
        self._epoch_mark = (-1, 0, 0.0)  # (epoch, its steps done, when) at its first step

    def eta(self, epoch: int, step: int) -> tuple[float | None, float | None]:
        """Seconds left in ``epoch`` and in the run once ``step`` of ``epoch`` is done.

        The epoch's from its steps so far (none before its second step), the run's from
        every step and pause (evaluations, checkpoints) since the run (or resume) began.
        """
        now = time.perf_counter()
        done = self.global_step(epoch, step)
        first = done - 1 if self._first is None else self._first
        mark_epoch, mark_step, mark_time = self._epoch_mark
        epoch_left = None
        if mark_epoch == epoch and step > mark_step and now > mark_time:
            per_step = (now - mark_time) / (step - mark_step)
            epoch_left = (self.steps_per_epoch - step - 1) * per_step
        run_left = None
        if done > first and now > self._started:
            run_left = (self.epochs * self.steps_per_epoch - done) * \
                (now - self._started) / (done - first)
        return epoch_left, run_left

    @property
    def active(self) -> bool:
        """Whether there is anything to show or write."""
        return self.lines or self.writer is not None

    def global_step(self, epoch: int, step: int) -> int:
        """Optimizer steps once step ``step`` of epoch ``epoch`` is done."""
        return epoch * self.steps_per_epoch + step + 1

    def step(self, epoch: int, step: int, loss: Tensor, count: float, edges: int) -> None:
        """After a step: its summed loss (on the device), its items and sampled edges."""
        if self._first is None:
            self._first = self.global_step(epoch, step) - 1
        if self._epoch_mark[0] != epoch:
            self._epoch_mark = (epoch, step, time.perf_counter())
        if not self.active:
            return
        self._pending.append((self.global_step(epoch, step), loss.detach(), count))
        self._steps += 1
        self._edges += edges
        now = time.perf_counter()
        due = (step + 1) % self.every == 0 if self.every else \
            now - self._since >= LOG_INTERVAL_S
        if due:
            self.flush(epoch, step)

    def flush(self, epoch: int, step: int, line: bool = True) -> None:
        """Write the pending losses and log a line (one device read; none if neither)."""
        if not self._pending:
            return
        show = self.lines and line
        if self.writer is not None or show:
            losses = torch.stack([p[1].float() for p in self._pending]).tolist()
            if self.writer is not None:
                for (at, _, n), total in zip(self._pending, losses, strict=True):
                    if n:
                        self.writer.add("train/step_loss", total / n, at)
                self.writer.flush()
            if show:
                seconds = max(time.perf_counter() - self._since, 1e-9)
                edges = (f", {self._edges / seconds / 1e6:.3g}M sampled edges/s"
                         if self._edges else "")
                log.info("epoch %d/%d step %d/%d: loss %.4f, %.1f steps/s%s (rank 0)%s",
                         epoch + 1, self.epochs, step + 1, self.steps_per_epoch,
                         sum(losses) / max(sum(p[2] for p in self._pending), 1),
                         self._steps / seconds, edges, format_eta(*self.eta(epoch, step)))
        self._pending.clear()
        self._since, self._steps, self._edges = time.perf_counter(), 0, 0

    def epoch(self, entry: dict[str, Any]) -> None:
        """Write an epoch's figures (its run-record entry) at its last step."""
        if self.writer is None:
            return
        at = self.global_step(entry["epoch"], self.steps_per_epoch - 1)
        for tag, key in EPOCH_SCALARS.items():
            if entry.get(key) is not None:
                self.writer.add(tag, entry[key], at)
        comm = entry.get("comm") or {}
        self.writer.add("comm/bytes", sum(v["bytes"] for v in comm.values()), at)
        self.writer.flush()

    def final(self, summary: dict[str, Any]) -> None:
        """Write the run's final full-neighbour figures (``final/*``) at its last step.

        Only a run whose final evaluation is its own (``eval`` ``full`` of a node task):
        otherwise the final figures are the last epoch's, already written.
        """
        if self.writer is None or summary.get("eval") != "full" or \
                summary.get("task") == "link":
            return
        at = self.epochs * self.steps_per_epoch
        for key in FINAL_SCALARS:
            if summary.get(key) is not None:
                self.writer.add(f"final/{key}", summary[key], at)
        self.writer.flush()

    def close(self) -> None:
        """Release the writer."""
        if self.writer is not None:
            self.writer.close()
