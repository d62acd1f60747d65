"""``gnnpar-train``: train a GNN on a partitioned graph, every mode, one command.

Usage::

    gnnpar-train [DATASET] [--mode sample|full] [--nproc N] [--config FILE] [flags ...]

``DATASET`` is a partition directory (``gnnpar-partition``'s output) or a dataset spec
(default: the embedded synthetic graph ``synthetic:sbm``), which is partitioned into one
part per process first and cached under ``ROOT/partitions``.  Every flag is a field of
:class:`~gnnpar.train.config.Config` (``--help`` lists them by section); ``--config FILE``
reads them from TOML or JSON, and flags given on the command line win.

Two ways to start the processes:

* ``gnnpar-train ... --nproc N`` starts N workers on this machine
  (:mod:`gnnpar.train.launch`: loopback only, one short error line per failed rank);
* ``torchrun --nproc-per-node N [--nnodes ...] -m gnnpar.train ...`` (or the
  ``gnnpar-train`` script under torchrun) makes this process one worker.

With ``--max-restarts N`` (``gnnpar-train``'s launcher, one process by default) or
``torchrun --max-restarts N``, a worker that dies or hangs restarts every worker, which
continue from the run's newest checkpoint (:mod:`gnnpar.train.elastic`).  Without either,
it trains in one process.  Every check that needs no data (flags, the
world size against the partition, the device, the run directory) runs before a worker
starts.  At the end it prints the test accuracy, the epoch time, the sampled edges per
second and the bytes communicated by kind; ``OUT/record.json`` holds everything per epoch.
Ctrl-C stops every worker and prints the command that resumes the run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from gnnpar.artifacts.files import write_json_atomic
from gnnpar.artifacts.kinds import CHECKPOINT_DIR, CONFIG_FILE, RECORD_FILE
from gnnpar.config import ArgumentParser, add_config_arguments, parse_config
from gnnpar.console import log_to_stderr
from gnnpar.errors import ConfigError, GnnparError
from gnnpar.sizes import format_bytes
from gnnpar.train.config import Config
from gnnpar.train.launch import Interrupted, exit_now, threads_per_rank
from gnnpar.train.record import command_started, format_startup

PROG = "gnnpar-train"
PRINTER_GRACE_S = 5.0  # how long a rank that does not print an error waits to exit
log = logging.getLogger("gnnpar")


def build_parser(prog: str = PROG, description: str | None = None) -> argparse.ArgumentParser:
    """The ``gnnpar-train`` argument parser: one flag per configuration field."""
    parser = ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=description or "Train a GNN on a graph split over several processes: "
        "distributed neighbour sampling (--mode sample) or full-graph halo exchange "
        "(--mode full), DDP, exact full-neighbour inference at the end.",
        epilog="Examples:\n  gnnpar-train --nproc 2\n"
        "  gnnpar-train --nproc 2 --mode full --model gcn --epochs 100 --lr 0.01\n"
        "  gnnpar-train edges.csv --features x.npy --labels y.csv --split 0.6,0.2,0.2 "
        "--nproc 2\n"
        "  gnnpar-train ogbn-products --undirected --nproc 4 --fanouts 15,10,5 --layers 3\n"
        "  gnnpar-train --config runs/sbm-sample/config.json --resume\n"
        "  torchrun --nproc-per-node 2 -m gnnpar.train parts/sbm-2 --out runs/sbm")
    add_config_arguments(parser, Config)
    return parser


def parse(argv: Sequence[str] | None = None, defaults: dict[str, Any] | None = None,
          parser: argparse.ArgumentParser | None = None) -> Config:
    """The validated configuration of a ``gnnpar-train`` command line.

    Args:
        argv: Arguments without the program name (default ``sys.argv[1:]``).
        defaults: ``{"section.field": value}`` defaults of an example script.
        parser: The parser (default :func:`build_parser`'s).

    Raises:
        ConfigError: A value or a combination of values is invalid.
    """
    cfg, _, _ = parse_config(parser or build_parser(), Config, argv, defaults)
    return cfg.validate()


# ---------------------------------------------------------------------- workers
def run_worker(cfg: Config, part_dir: str | None = None, out: str | None = None,
               startup: dict[str, float] | None = None, started: float | None = None,
               launched: float | None = None) -> dict[str, Any] | None:
    """Train as one rank of the process group in the environment (torchrun's, or none).

    Args:
        cfg: The validated configuration.
        part_dir: The partition directory, when the launcher settled it; ``None``: rank 0
            settles the run directory and the partition (it partitions a dataset spec
            when no cached partition exists) and tells the others.
        out: The run directory the launcher prepared (with ``part_dir``).
        startup: Seconds of the launcher's start-up phases so far.
        started: When the command started (``time.monotonic()``): the run's wall time counts
            from there (default: now).
        launched: When the launcher started these workers (``time.monotonic()``; a
            restart's start-up counts from there).

    Returns:
        The run record on rank 0, ``None`` on the other ranks.
    """
    from datetime import timedelta

    import torch

    from gnnpar.comm import broadcast_text, ranks_on_this_host
    from gnnpar.distributed import init, shutdown
    from gnnpar.faults import agreed
    from gnnpar.malloc import retain_freed_memory
    from gnnpar.train.checkpoint import has_checkpoint
    from gnnpar.train.elastic import restart_number

    spawned = time.monotonic()
    started = spawned if started is None else started
    hold = contextlib.ExitStack()  # rank 0's lock of the run directory, when it settles it
    phases = dict(startup or {})
    ctx = init(device=cfg.run.device, timeout=timedelta(seconds=cfg.run.timeout_s))
    if cfg.run.threads or ctx.world_size > 1:
        # Under torchrun nothing else fits the threads to the cores: with one rank per
        # agent torchrun leaves each rank torch's default (every core), and the ranks of
        # several agents may share a machine; their threads would wait on each other.
        torch.set_num_threads(cfg.run.threads or threads_per_rank(ranks_on_this_host(ctx)))
    retain_freed_memory()  # no page faults for each step's buffers (gnnpar/malloc.py)
    if ctx.is_main:
        log_to_stderr()
    ready = spawned if startup is None else launched or started + sum(phases.values())
    phases["spawn"] = time.monotonic() - ready  # the launcher's processes, or init() alone
    if ctx.is_main and ctx.world_size > 1:
        log.info("%d workers joined the process group (%.1f s)", ctx.world_size,
                 phases["spawn"])
    done = False
    try:
        if part_dir is None:
            restart = restart_number(ctx) > 0

            def settle() -> str:
                if not ctx.is_main:
                    return ""
                local = int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world_size))
                # Under torchrun the other ranks are waiting: never partition there.
                parts, run_dir = _settle(cfg, ctx.world_size, local, phases, hold,
                                         make=ctx.world_size == 1, restart=restart)
                resume = cfg.run.resume or (restart and has_checkpoint(
                    run_dir / CHECKPOINT_DIR))
                return json.dumps([str(parts), str(run_dir), phases, resume])

            part_dir, out, phases, resume = json.loads(broadcast_text(ctx, agreed(ctx, settle)))
            # A restarted torchrun worker continues the run (the same command, retyped by
            # torchrun): resumed from its checkpoint, else started over.
            cfg = dataclasses.replace(cfg, run=dataclasses.replace(
                cfg.run, resume=resume, overwrite=cfg.run.overwrite and not resume))
        cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, out=out))
        record = _train(cfg, part_dir, ctx, phases, started)
        done = True
        return record
    except BaseException as exc:
        _restore(out if ctx.is_main else None)
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(out) from None
        raise
    finally:
        try:
            shutdown(wait=done)
        finally:
            hold.close()


def _settle(cfg: Config, world_size: int, local_world_size: int, phases: dict[str, float],
            hold: contextlib.ExitStack, make: bool = True, restart: bool = False
            ) -> tuple[Path, Path]:
    """The checks, the run directory and the partition: ``(partition dir, run dir)``.

    Their seconds go to ``phases``; the run directory's lock goes to ``hold`` (released
    when the run ends); a failed partition puts back the run that ``--overwrite`` set
    aside.  ``restart``: torchrun restarted the workers, which continue the run.
    """
    from gnnpar.train.prepare import check_before_start, resolve_partition

    t0 = time.monotonic()
    out = check_before_start(cfg, world_size, local_world_size, hold, restart)
    phases["check"] = time.monotonic() - t0
    try:
        return resolve_partition(cfg, world_size, progress=cfg.run.progress, make=make,
                                 phases=phases), out
    except BaseException:
        _restore(out)
        raise


def _train(cfg: Config, part_dir: str, ctx: Any, startup: dict[str, float],
           started: float) -> dict[str, Any] | None:
    """Fit; the trainer (its DDP reducer holds the process group) is gone on return."""
    from gnnpar.train.trainer import Trainer

    trainer = Trainer(cfg, part_dir, ctx, startup, started)
    trainer.fit()
    return trainer.record.to_dict() if ctx.is_main else None


def launch(cfg: Config, started: float | None = None,
           phases: dict[str, float] | None = None) -> dict[str, Any]:
    """Settle everything, start ``cfg.run.nproc`` workers here, return the run record.

    Args:
        cfg: The validated configuration.
        started: When the command started (``time.monotonic()``; default: now): the run's
            wall time counts from there to the last worker's exit.
        phases: Seconds of the start-up phases before this call (``import``).

    Raises:
        WorkersFailed: A rank failed (the message names it and its error).
        Interrupted: Ctrl-C or SIGTERM; every rank was stopped.
    """
    nproc = cfg.run.nproc or 1  # --max-restarts alone: one worker, restarted
    started = time.monotonic() if started is None else started
    phases = dict(phases or {})
    with contextlib.ExitStack() as hold:  # the run directory's lock, for the whole run
        part_dir, out = _settle(cfg, nproc, nproc, phases, hold)
        return _run_workers(cfg, nproc, part_dir, out, phases, started)


def _run_workers(cfg: Config, nproc: int, part_dir: Path, out: Path,
                 phases: dict[str, float], started: float) -> dict[str, Any]:
    """Start the workers of a settled run and wait for them; the run record.

    A failure that a restart may get past (not a user error) starts every worker again,
    up to ``--max-restarts`` times, continuing from the newest checkpoint.
    """
    from gnnpar.faults import stale_after  # torch: after the checks, which refuse at once
    from gnnpar.train.launch import Launcher, WorkersFailed

    threads = cfg.run.threads or threads_per_rank(nproc)
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, threads=threads))
    log.info("starting %d workers (%d torch threads each)", nproc, threads)
    # A hung rank: the others' collective times out (T = timeout_s), they find its
    # heartbeat stale within 0.15 T (faults.FailureBoard) and the launcher stops it at
    # once: every rank is reported and stopped within 1.5 T.  A silent rank whose
    # heartbeat still runs (a deadlock) gets a quarter of T (the board), then a tenth
    # (here, at least 2 s for the others to report theirs).
    t, limit = cfg.run.timeout_s, cfg.run.max_restarts
    launcher = Launcher(nproc, threads, grace_s=min(10.0, max(2.0, t / 10)),
                        stale_s=stale_after(t), max_restarts=limit)
    try:
        while True:
            try:
                launcher.run("gnnpar.train.cli:run_worker",
                             (cfg, str(part_dir), str(out), phases, started, time.monotonic()))
                break
            except WorkersFailed as exc:
                if launcher.restarts >= limit or not exc.restartable:
                    if limit and exc.restartable:
                        log.warning("no restart left (--max-restarts %d): the run stops.",
                                    limit)
                    raise
                cfg = _restart(cfg, out, exc, launcher)
    except Interrupted:
        if not _restore(out):
            _mark_interrupted(out / RECORD_FILE)
        raise Interrupted(str(out)) from None
    except GnnparError:
        _restore(out)
        raise
    return close_wall_time(out / RECORD_FILE, started)


def close_wall_time(path: Path, started: float) -> dict[str, Any]:
    """The finished run's record, its wall time now counted to this moment (rewritten).

    The trainer ends its wall time at the final outputs; what follows (the workers
    leaving the process group and exiting) is the summary's ``teardown_s``.
    """
    from gnnpar.train.record import RunRecord

    record = RunRecord.load(path)
    wall = time.monotonic() - started
    record.summary["teardown_s"] = max(0.0, wall - record.summary["wall_time_s"])
    record.summary["wall_time_s"] = wall
    record.write(path)
    return record.to_dict()


def _restart(cfg: Config, out: Path, exc: Any, launcher: Any) -> Config:
    """Before the launcher starts the workers again: note the failure, settle the run.

    The failure goes to the store as the launcher's note of the failed start (the
    restarted rank 0 records it, :mod:`gnnpar.train.elastic`); the run directory, whose
    lock the launcher still holds, is settled to continue from its newest complete
    checkpoint (:func:`~gnnpar.train.rundir.prepare_restart`).

    Returns:
        ``cfg`` with ``resume`` set as the restarted workers continue.
    """
    from gnnpar.distributed import STARTS_KEY
    from gnnpar.train.elastic import post_note
    from gnnpar.train.rundir import prepare_restart

    start = int(launcher.store.add(STARTS_KEY.format(rank=0), 0))  # rank 0's, that failed
    post_note(launcher.store, start, "launcher", exc.first_cause, str(exc),
              at=exc.failed_at)
    resume = prepare_restart(out)
    log.warning("%s\nrestarting every worker (restart %d of %d) %s", str(exc).splitlines()[0],
                launcher.restarts + 1, cfg.run.max_restarts,
                "from the newest checkpoint" if resume else "from the start (no checkpoint "
                "was written yet)")
    return dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, resume=resume,
                                                            overwrite=False))


def _restore(out: str | Path | None) -> bool:
    """Put back the run that ``--overwrite`` was replacing, when the new one failed first."""
    from gnnpar.train.rundir import restore_replaced

    if not restore_replaced(out):
        return False
    log.warning(
        "%s: the new run ended before its first checkpoint; the run that --overwrite was "
        "replacing is back in place.", out)
    return True


def _mark_interrupted(path: Path) -> None:
    """Record that the launcher stopped the run (rank 0 may have seen only a peer leave)."""
    from gnnpar.train.record import RunRecord

    try:
        record = RunRecord.load(path)
    except GnnparError:
        return  # no record yet
    record.status = "interrupted"
    record.write(path)


# ---------------------------------------------------------------------- reports
def _acc(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _hits(hits: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in sorted(
        hits.items(), key=lambda kv: int(kv[0].split("@")[1])))


def _link_line(s: dict[str, Any]) -> str:
    """The last evaluation's MRR and Hits@K of a link-prediction summary."""
    if s["test_hits"] is None:
        return "not evaluated at the end (--eval none)"
    head = (f"{s['test_mrr']:.4f} (val {_acc(s['val_mrr'])}); "
            if s["test_mrr"] is not None else "")
    return f"{head}{_hits(s['test_hits'])} (full-neighbour embeddings)"


def _last_line(s: dict[str, Any]) -> str:
    """The last epoch's figures: MRR / Hits@K, or the final then sampled accuracies."""
    if s.get("task") == "link":
        return _link_line(s)
    if s["eval"] == "none":
        return "not evaluated at the end (--eval none)" + (
            f"; {_acc(s['test_acc_sampled'])} sampled (val {_acc(s['val_acc_sampled'])})"
            if s["mode"] == "sample" else "")
    if s["eval"] == "sampled":
        return (f"{_acc(s['test_acc'])} sampled "
                f"(val {_acc(s['val_acc'])}; the last epoch's, on sampled neighbourhoods)")
    sample = s["mode"] == "sample"
    return (f"{_acc(s['test_acc'])} full-neighbour"
            + (f", {_acc(s['test_acc_sampled'])} sampled" if sample else "")
            + f" (val {_acc(s['val_acc'])}"
            + (f" / {_acc(s['val_acc_sampled'])}" if sample else "") + ")")


def _accuracy_lines(s: dict[str, Any]) -> list[str]:
    """``test MRR`` / ``test accuracy``: the best-valid evaluation's, then the last epoch's.

    One line, the last epoch's, when its model is the best-valid one (its final
    evaluation, exact by default, says more than the epoch's own).
    """
    link = s.get("task") == "link"
    best = s.get("best")
    last = _last_line(s)
    shared = link and s["test_mrr"] is None and (best is None or best["test_mrr"] is None)
    label = ("test hits:         " if shared else "test MRR:          " if link
             else "test accuracy:     ")
    if best is None or best["epoch"] + 1 == s["epochs"]:
        return [label + last]
    metric = best["metric"].removeprefix("val_")
    test = ((best["test_hits"] or {}).get(metric) if shared else
            best["test_mrr"] if link else best["test_acc"])
    metric = {"acc": "accuracy", "mrr": "MRR"}.get(metric, metric)
    stop = (f"; stopped early, {best['evaluations_after']} evaluations without a gain"
            if s.get("stopped_early") else "")
    where = "" if link or s["mode"] == "full" else ", on sampled neighbourhoods"
    head = (f"{label}{_acc(test)} at the best validation {metric} (epoch {best['epoch'] + 1} "
            f"of {s['epochs']}: val {best['value']:.4f}{where}{stop})")
    if link and best["test_hits"]:
        head += f"; {_hits(best['test_hits'])}"
    return [head, "  last epoch:      " + last]


def format_summary(record: dict[str, Any]) -> str:
    """The end-of-run report printed by ``gnnpar-train``.

    Args:
        record: A run record (:meth:`RunRecord.to_dict`) with its summary.
    """
    s, c, env, part = record["summary"], record["config"], record["env"], record["partition"]
    model, sample = c["model"], s["mode"] == "sample"
    how = (f"fanouts {','.join(map(str, c['sample']['fanouts']))}, batch "
           f"{c['sample']['batch_size']}/rank" if sample else "full graph" + (
               f", BNS p={c['full']['boundary_p']}" if c["full"]["boundary_p"] else "")
           + (", stale halos" if c["full"]["stale"] else "")
           + (f", 3D grid {c['full']['grid']}" if c["full"].get("grid") else ""))
    lines = [
        f"{part['name']}: {part['num_nodes']:,} nodes, {part['num_edges']:,} edges, "
        f"{part['num_parts']} parts ({part['partitioner']}), {env['world_size']} workers "
        f"({env['device']}); {s['mode']} mode, {model['name']} "
        f"{model['layers']}x{model['hidden']}, {how}, {s['epochs']} epochs",
        *_accuracy_lines(s),
        f"epoch time:        {s['epoch_time_s']:.2f} s ({s['steps_per_epoch']} step"
        f"{'s' if s['steps_per_epoch'] != 1 else ''}; mean after the first epoch)",
    ]
    t = s["step_time_s"]
    lines.append("  of which:        " + ", ".join(
        f"{k} {t[k]:.2f} s" for k in ("sample", "fetch", "forward", "backward", "optimizer")
        if sample or k not in ("sample", "fetch")) + (
        f" ({t['wait']:.2f} s of sample + fetch blocked in exchanges)" if sample else ""))
    if sample:
        lines.append(f"sampled edges/s:   {s['sampled_edges_per_s'] / 1e6:.3f} M (all ranks)")
    lines.append("communicated per epoch (all ranks):")
    width = max([12, *map(len, s["comm_per_epoch"])])
    for kind, v in s["comm_per_epoch"].items():
        lines.append(f"  {kind:<{width}} {v['rows']:>14,} rows {format_bytes(v['bytes']):>12}")
    if s["eval"] == "full":
        total = sum(v["bytes"] for v in s["eval_comm"].values())
        lines.append(f"full-neighbour inference: {format_bytes(total)} communicated")
    mem = s["peak_memory_bytes"]
    lines.append(f"peak memory:       {format_bytes(mem['host'])} host (largest rank)" + (
        f", {format_bytes(mem['device'])} GPU" if mem["device"] is not None else ""))
    startup = s.get("startup_s") or {}
    parts = ([f"start-up {format_startup(startup)}"] if startup else []) + (
        [f"teardown {s['teardown_s']:.1f} s"] if s.get("teardown_s") is not None else [])
    lines.append(f"total wall time:   {s['wall_time_s']:.1f} s" + (
        f" ({'; '.join(parts)})" if parts else ""))
    if s.get("predictions"):
        lines.append(f"predictions:       {s['predictions']} (gnnpar.load_predictions("
                     f"{str(Path(s['predictions']).parent)!r}))")
    lines.append(f"run record:        {s['record']}")
    return "\n".join(lines)


def resume_hint(out: str | Path | None) -> str:
    """What to type to continue an interrupted run in ``out``."""
    if out is None:
        return "no checkpoint was written yet."
    ckpt = Path(out) / CHECKPOINT_DIR / "state.json"
    where = "no checkpoint yet"
    try:
        pos = json.loads(ckpt.read_text())["state"]["extra"]["position"]
        where = f"the newest checkpoint is epoch {pos['epoch'] + 1}, step {pos['step']}"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return (f"{where}; continue with: {PROG} --config {Path(out) / CONFIG_FILE} --resume"
            if ckpt.is_file() else f"{where} in {out}.")


def _printer(exc: GnnparError) -> bool:
    """Whether this process prints ``exc`` (once per run, also under torchrun)."""
    if exc.reported_by_cause and exc.cause_rank == 0:
        return False  # rank 0 prints its own error
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    return rank == (1 if exc.cause_rank == 0 and world > 1 else 0)


def _report_to_torchrun(text: str) -> None:
    """Hand the one-line error to torchrun's failure summary (its error file)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path and "RANK" in os.environ:
        with contextlib.suppress(OSError, GnnparError):  # the summary is a courtesy
            write_json_atomic(path, {"message": text, "timestamp": int(time.time())})


def main(argv: Sequence[str] | None = None, defaults: dict[str, Any] | None = None,
         prog: str = PROG, description: str | None = None) -> int:
    """Entry point of ``gnnpar-train`` (and of the example scripts); the exit status.

    Args:
        argv: Arguments without the program name (default: the command line, whose
            wall time counts from the process's start: :func:`command_started`).
        defaults: ``{"section.field": value}`` defaults of an example script.
        prog: Program name in messages.
        description: ``--help`` description.
    """
    started = command_started() if argv is None else time.monotonic()
    if int(os.environ.get("RANK", "0")) == 0:
        log_to_stderr()
    try:
        cfg = parse(argv, defaults, build_parser(prog, description))
        if cfg.run.plan:
            from gnnpar.train.plan import plan_run

            print(plan_run(cfg))
            return 0
        phases = {"import": time.monotonic() - started}
        if cfg.run.max_restarts and cfg.run.nproc is None and "RANK" in os.environ:
            raise ConfigError("--max-restarts restarts gnnpar-train's own workers, and this "
                              "process is a torchrun worker.", field="run.max_restarts",
                              fix="pass torchrun --max-restarts N instead (and --out DIR).")
        record = (launch(cfg, started, phases) if cfg.run.nproc is not None
                  or cfg.run.max_restarts else run_worker(cfg, startup=phases, started=started))
        if record is not None and cfg.run.nproc is None and not cfg.run.max_restarts:
            record = close_wall_time(Path(record["summary"]["record"]), started)
    except GnnparError as exc:
        text = str(exc)
        _report_to_torchrun(text)
        if _printer(exc):
            print(f"{prog}: error: {text}", file=sys.stderr)
        elif int(os.environ.get("WORLD_SIZE", "1")) > 1:
            # torchrun stops every rank when the first exits: let the printer go first
            # (an error every rank raises, such as a bad flag, is printed once).
            time.sleep(PRINTER_GRACE_S)
        return 1
    except (Interrupted, KeyboardInterrupt) as exc:
        if int(os.environ.get("RANK", "0")) == 0:
            out = exc.out if isinstance(exc, Interrupted) else None
            print(f"\n{prog}: interrupted, every worker stopped; {resume_hint(out)}",
                  file=sys.stderr)
        return 130
    if record is not None:
        print(format_summary(record))
    return 0


def command() -> NoReturn:
    """The ``gnnpar-train`` executable (and ``python -m gnnpar.train``): :func:`main`.

    The process then ends without the interpreter's teardown, so the summary's total
    wall time is the command's (:func:`~gnnpar.train.launch.exit_now`).
    """
    exit_now(main())


if __name__ == "__main__":
    command()
