"""The run record ``OUT/record.json``: one schema for every mode, every example, every run.

Rank 0 writes it atomically at the start of a run, after every epoch and at the end, so it
is readable while the run goes on and complete up to the last finished epoch after a
crash.  Metrics are all-reduced before they are recorded (every rank would write the same
figures).  ``gnnpar-plot OUT`` draws it.  The fields, level by level, are
:data:`TOP_FIELDS`, :data:`EPOCH_FIELDS` and :data:`SUMMARY_FIELDS` (a test checks that a
real run writes exactly these keys), and :data:`RESTART_FIELDS` per restart::

    {"format": "gnnpar-run", "format_version": 2, "status": "complete",
     "config": {"data": {...}, "model": {...}, ...},
     "partition": {"dir": "...", "num_parts": 2, ...}, "env": {"world_size": 2, ...},
     "epochs": [{"epoch": 0, "train_loss": 1.9, "val_acc": 0.41, ...,
                 "comm": {"feature": {"rows": 250311, "bytes": 66079104}, ...},
                 "eval_comm": {...}}, ...],
     "summary": {"eval": "full", "test_acc": 0.748, "test_acc_sampled": 0.723, ...},
     "restarts": [{"restart": 1, "rank": 1, "reason": "rank 1 of 2: killed by ...",
                   "resumed_from": {"epoch": 3, "step": 40}, "steps_redone": 17, ...}]}

Bytes are what all ranks together sent to other ranks (what one rank sends to itself is
not counted), by kind: ``feature`` rows and the ``feature_ids`` that asked for them,
``sample`` (adjacency requests and replies), ``cache_fill``, ``grad`` (the gradient
all-reduce, ring volume), ``halo`` / ``halo_grad`` (full-graph rows and their gradients),
``halo_setup``; training steps under ``comm``, evaluation apart under ``eval_comm``.
"""

from __future__ import annotations

import os
import platform
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnpar.artifacts.files import write_digested_json
from gnnpar.artifacts.kinds import RUN_RECORD
from gnnpar.errors import ConfigError

STATUSES = ("running", "complete", "interrupted", "failed")

TOP_FIELDS = {
    "format": '"gnnpar-run".',
    "format_version": "4 (version 3 named the partition's feature_dtype feat_dtype; version "
                      "2 had no files nor digest; version 1, gnnpar 0.1, kept "
                      "args/comm_bytes per example).",
    "files": "What the run writes into its directory, besides this file (config.json, "
             "checkpoint, metrics, predictions): what --overwrite moves aside, and all a "
             "run directory may hold.",
    "status": "running, complete, interrupted (Ctrl-C, a signal) or failed.",
    "config": "The whole resolved configuration, section by section (the --config file "
              "that repeats the run).",
    "partition": "The partition trained on: dir, name, num_parts, num_nodes, num_edges, "
                 "feat_dim, feature_dtype, num_classes, partitioner.",
    "env": "Where it ran: gnnpar, torch and python versions, host, world_size, backend, "
           "device, torch_threads.",
    "epochs": "One entry per finished epoch (EPOCH_FIELDS).",
    "summary": "Final figures (SUMMARY_FIELDS); empty until the run completes.",
    "restarts": "Runs restarted on failure (--max-restarts, torchrun --max-restarts): one "
                "entry per failure and the restart that followed it (RESTART_FIELDS), "
                "oldest first; [] when none.",
    "digest": "SHA-256 of the rest of the document: a record changed after it was "
              "written is refused.",
}
EPOCH_FIELDS = {
    "epoch": "0-based epoch number.",
    "train_loss": "Mean training loss over all ranks' training seeds of the epoch "
                  "(--task link: binary cross-entropy over the labelled pairs).",
    "train_acc": "Training accuracy over the same seeds (sample mode: on sampled "
                 "neighbourhoods, with dropout; full mode: exact, with dropout; --task "
                 "link: pairs whose logit has the label's sign).",
    "val_acc": "Validation accuracy, or null when not evaluated this epoch "
               "(--eval-every): sampled neighbourhoods in sample mode, exact in full mode.",
    "test_acc": "Test accuracy, as val_acc.",
    "val_mrr": "--task link: validation MRR against each edge's fixed candidates (exact "
               "full-neighbour embeddings; as ogb.linkproppred.Evaluator), null when not "
               "evaluated, for shared negatives, or for a node task.",
    "test_mrr": "Test MRR, as val_mrr.",
    "val_hits": "--task link: validation {hits@K: value} (K = 1, 10, 50, 100), or null.",
    "test_hits": "Test Hits@K, as val_hits.",
    "epoch_time_s": "Seconds of the training steps (mean over ranks; evaluation, "
                    "checkpoint and record excluded).",
    "eval_time_s": "Seconds of this epoch's evaluation (mean over ranks), or null.",
    "sampled_edges": "Sample mode: edges sampled by all ranks in the epoch; full: null.",
    "sampled_edges_per_s": "sampled_edges / epoch_time_s; full mode: null.",
    "step_time_s": "Where the training steps' time went, summed over the epoch's steps and "
                   "averaged over ranks: sample (sampling the batches), fetch (gathering "
                   "their features), forward, backward (DDP's gradient all-reduce overlaps "
                   "it), optimizer, and wait, the part of sample and fetch blocked in "
                   "exchanges. Host seconds: on a GPU a phase's kernels can finish later.",
    "rank_time_s": "Per rank, in rank order: wall, the seconds of its training steps "
                   "(about equal on every rank: the steps are collective), and cpu, the "
                   "CPU seconds its process spent in them, threads included (waiting in "
                   "a collective costs none): the slowest rank's cpu over the mean is "
                   "what an unbalanced partition costs every step. {wall: [...], cpu: "
                   "[...]}.",
    "comm": "Rows and bytes sent by all ranks in the training steps, by kind: "
            "{kind: {rows, bytes}}.",
    "eval_comm": "The same for this epoch's evaluation ({} when none).",
}
SUMMARY_FIELDS = {
    "task": "node (classification) or link (prediction).",
    "mode": "sample or full.",
    "eval": "Where train_acc, val_acc and test_acc come from (--eval): full (exact "
            "full-neighbour inference after the last epoch), sampled (the last epoch's "
            "sampled evaluation; train_acc null) or none (all three null); --eval auto "
            "is recorded as the one it took.",
    "epochs": "Epochs finished.",
    "steps_per_epoch": "Steps per epoch, the same on every rank (full mode: 1).",
    "train_acc": "With eval full: exact full-neighbour accuracy after the last epoch (every "
                 "in-neighbour of every node, layer by layer on the partitioned graph).",
    "val_acc": "The same on the validation nodes (eval sampled: the sampled figure).",
    "test_acc": "The same on the test nodes (eval sampled: the sampled figure).",
    "best": "The best-valid evaluation, OGB's model selection (gnnpar.train.best): "
            "{epoch (0-based), metric (val_acc; --task link: val_mrr, or val_hits@50 with "
            "shared negatives), value, val_acc, test_acc, val_mrr, test_mrr, val_hits, "
            "test_hits (that epoch's figures, as its entry of epochs holds them), "
            "evaluations_after (evaluations since, none better), checkpoint (OUT/best, "
            "its weights; null without --save-best)}, or null when nothing was evaluated.",
    "stopped_early": "Whether --early-stop ended the run before --epochs (epochs says "
                     "after how many).",
    "val_acc_sampled": "Sample mode: the last epoch's sampled validation accuracy; full: null.",
    "test_acc_sampled": "Sample mode: the last epoch's sampled test accuracy; full: null.",
    "val_mrr": "--task link: the last evaluation's validation MRR (exact), else null.",
    "test_mrr": "--task link: the last evaluation's test MRR (exact), else null.",
    "val_hits": "--task link: the last evaluation's validation Hits@K, else null.",
    "test_hits": "--task link: the last evaluation's test Hits@K, else null.",
    "epoch_time_s": "Mean epoch_time_s over the epochs after the first (which warms up).",
    "sampled_edges_per_s": "Mean sampled_edges_per_s over the same epochs; full mode: null.",
    "step_time_s": "Mean step_time_s over the same epochs, by phase.",
    "comm_per_epoch": "Mean comm over the same epochs: {kind: {rows, bytes}}.",
    "eval_comm": "Rows and bytes of the final full-neighbour inference, by kind ({} "
                 "without one).",
    "wall_time_s": "Seconds from the start of the command's process (under torchrun: its "
                   "agent's; command_started) until its workers exited, start-up and "
                   "teardown included; a Trainer run from Python: from its construction to "
                   "the end of the final evaluation and outputs.",
    "teardown_s": "Seconds from the end of the final evaluation and outputs until the "
                  "workers exited (under torchrun: until rank 0 left the process group), "
                  "counted in wall_time_s; null for a Trainer run from Python.",
    "startup_s": "Seconds of each start-up phase before the first epoch: import (the "
                 "interpreter's start, its imports and the flags; under torchrun also the "
                 "agent's start and rendezvous), check (settings "
                 "and run directory), load and partition (a dataset spec, when not cached), "
                 "spawn (starting the workers and joining the process group), setup (each "
                 "rank's part, model and loaders; the slowest rank's is not awaited).",
    "predictions": "The predictions directory (--save-predictions, --save-embeddings; "
                   "gnnpar.load_predictions reads it), else null.",
    "peak_memory_bytes": "Largest peak over the ranks: {host: resident set size, "
                         "host_growth: its rise since the rank's Trainer began (the run's "
                         "data and state, not the imported libraries), device: CUDA "
                         "memory allocated by torch, or null on a CPU}.",
    "record": "Path of this file.",
}


RESTART_FIELDS = {
    "restart": "1 for the run's first restart, 2 for the second, ...; null: the failure "
               "that ended the run (no restart followed).",
    "failed_at": "When the failure was seen (UTC, ISO 8601), or null when no rank could "
                 "tell.",
    "rank": "The rank that died, hung or raised first, or null when unknown.",
    "reason": "Why, in a line: the launcher's error (gnnpar-train), else the rank's own "
              "or its peers' explanation (torchrun).",
    "resumed_from": "{epoch, step} of the checkpoint the restart continued from (0-based, "
                    "the next step), or null when the run had none yet and started over.",
    "steps_redone": "Training steps finished before the failure that the restart takes "
                    "again (the furthest rank's count past resumed_from), or null when "
                    "unknown.",
    "lost_s": "Seconds lost: from the checkpoint resumed from to the failure being seen "
              "(about --checkpoint-every-s at most, plus --timeout-s for a hang), or null.",
    "restart_s": "Seconds from the failure to the restarted run's first step: stopping "
                 "the ranks, starting new ones, loading their parts and the checkpoint "
                 "(null: not restarted).",
}


STARTUP_PHASES = ("import", "check", "load", "partition", "spawn", "setup")
"""The start-up phases, in the order they run (``summary.startup_s``)."""


def format_startup(phases: dict[str, float]) -> str:
    """``"4.1 s: load 1.0 s, partition 2.9 s, ..."`` of the start-up phases' seconds."""
    return f"{sum(phases.values()):.1f} s: " + ", ".join(
        f"{k} {phases[k]:.1f} s" for k in STARTUP_PHASES if k in phases)


def command_started() -> float:
    """When the command started, on ``time.monotonic()``'s scale.

    The start of this process (Linux: ``/proc/self/stat``), before the interpreter and
    its imports; under ``torchrun`` the start of its agent (this worker's parent), which
    the command line started.  Elsewhere: now.  The monotonic clock is one for every
    process of a machine and, unlike ``time.time()``, never steps (a virtual machine's
    clock may be set forward seconds at a time).
    """
    pid = os.getppid() if "TORCHELASTIC_RUN_ID" in os.environ else os.getpid()
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: start, ticks after boot
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, ValueError, IndexError, AttributeError):  # pragma: no cover - no /proc
        return time.monotonic()
    return time.monotonic() - (since_boot - ticks / os.sysconf("SC_CLK_TCK"))


@dataclass
class RunRecord:
    """A run's configuration and metrics, written as JSON by rank 0.

    Attributes:
        config: The run's configuration (:meth:`Config.to_dict`, or any JSON-able dict).
        partition: What it trains on (see :data:`TOP_FIELDS`).
        env: Where it ran.
        epochs: One dict of metrics per finished epoch (:data:`EPOCH_FIELDS`).
        summary: Final figures (:data:`SUMMARY_FIELDS`).
        status: One of :data:`STATUSES`.
        files: What the run writes into its directory besides ``record.json``.
        restarts: One entry per restart of its workers (:data:`RESTART_FIELDS`).
    """

    config: dict[str, Any]
    partition: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    status: str = "running"
    files: list[str] = field(default_factory=list)
    restarts: list[dict[str, Any]] = field(default_factory=list)

    @staticmethod
    def environment(world_size: int, backend: str, device: str) -> dict[str, Any]:
        """The ``env`` entry of a run on ``world_size`` ranks."""
        import torch

        from gnnpar.version import __version__

        return {"gnnpar": __version__, "torch": torch.__version__,
                "python": platform.python_version(), "host": socket.gethostname(),
                "world_size": world_size, "backend": backend, "device": device,
                "torch_threads": torch.get_num_threads()}

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunRecord:
        """Read a record written by :meth:`write`.

        Raises:
            ConfigError: Not a gnnpar run record of a version read here, a damaged one
                (its digest), or a field of the wrong type.
        """
        doc = RUN_RECORD.read(path, ConfigError, "pass the record.json of a gnnpar-train "
                              "run; never edit it by hand.")
        fields = {"config": dict, "partition": dict, "env": dict, "epochs": list,
                  "summary": dict, "status": str, "files": list, "restarts": list}
        for key, kind in fields.items():
            if key in doc and not isinstance(doc[key], kind):
                raise ConfigError(f"is {type(doc[key]).__name__}, expected {kind.__name__}.",
                                  path=path, field=key, fix="pass the record.json of a "
                                  "gnnpar-train run.")
        return cls(config=doc.get("config", {}), partition=doc.get("partition", {}),
                   env=doc.get("env", {}), epochs=list(doc.get("epochs", [])),
                   summary=doc.get("summary", {}), status=doc.get("status", "running"),
                   files=[str(f) for f in doc.get("files", [])],
                   restarts=[r for r in doc.get("restarts", []) if isinstance(r, dict)])

    def add_epoch(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Append (or, after a resume, replace) the metrics of ``entry["epoch"]``.

        Args:
            entry: Every key of :data:`EPOCH_FIELDS`.
        """
        missing = set(EPOCH_FIELDS) - set(entry)
        if missing or set(entry) - set(EPOCH_FIELDS):
            raise ValueError(f"epoch entry keys {sorted(entry)} differ from EPOCH_FIELDS "
                             f"(missing {sorted(missing)})")
        epoch = entry["epoch"]
        self.epochs = [e for e in self.epochs if e["epoch"] < epoch] + [entry]
        return entry

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return {"format": RUN_RECORD.format, "format_version": RUN_RECORD.version,
                "status": self.status, "files": self.files, "config": self.config,
                "partition": self.partition, "env": self.env, "epochs": self.epochs,
                "summary": self.summary, "restarts": self.restarts}

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the record to ``path`` atomically (call on rank 0 only).

        Raises:
            StorageError: The disk is full (naming the directory and the bytes needed);
                the previous record stays as it was.
        """
        write_digested_json(path, self.to_dict())
