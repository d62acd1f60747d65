"""The run directory: where a run's record and checkpoints go, and what may replace them.

A run writes ``OUT/record.json`` (:mod:`gnnpar.train.record`), ``OUT/config.json`` (its
resolved configuration, a ``--config`` file that repeats the run), ``OUT/checkpoint/`` and
``OUT/best/`` (the best-valid model, :mod:`gnnpar.train.best`).
Before any work starts, :func:`prepare_run_dir` settles ``OUT``:

* no ``--out``: a new ``runs/DATASET-MODE``, numbered ``-2``, ``-3``, ... when taken, so
  the same command run twice keeps both runs;
* ``--out`` absent or an empty directory: used;
* ``--out`` holding a run: continued with ``--resume`` (its checkpoint, with the same
  settings: :func:`check_resume` names every setting that differs), replaced with
  ``--overwrite``, otherwise refused;
* ``--out`` holding anything else, or a file: refused, even with ``--overwrite``.

A run directory is one whose ``record.json`` is a gnnpar run record (the marker, which
lists every other file the run writes) and that holds nothing else: the kind
:data:`~gnnpar.artifacts.kinds.RUN` says what that is, down to the files of its
checkpoint and predictions.  One process writes it at a time: the launcher (or rank 0)
holds its lock from these checks to the end of the run, and a second ``gnnpar-train``
on the same ``--out`` is refused, naming it.  ``--overwrite`` moves exactly what the old
record lists aside into ``OUT/.previous-run/``; the new run's first checkpoint deletes
it (:func:`commit_replacement`), and a new run that fails, is interrupted or is killed
before it gets there has it put back (:func:`restore_replaced`, also called by the next
command that reads or writes that directory), so a failed replacement loses nothing.
When a launcher restarts the run's workers (``--max-restarts``), :func:`prepare_restart`
(or ``prepare_run_dir(restart=True)`` under torchrun) settles the directory to continue
from its newest complete checkpoint.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

from gnnpar.artifacts.directory import recover_directory
from gnnpar.artifacts.kinds import (
    BEST_DIR,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    METRICS_CSV,
    PREDICTIONS_DIR,
    PREVIOUS_RUN,
    RECORD_FILE,
    RUN,
    RUN_FILES,
    STATE_FILE,
    TEMPORARY,
    TENSORBOARD_DIR,
)
from gnnpar.artifacts.lock import holder, lock
from gnnpar.artifacts.ownership import check_not_inside
from gnnpar.config import flag_of, sections
from gnnpar.errors import ConfigError
from gnnpar.partition.config import HOW_ONLY
from gnnpar.train.config import Config

RESUMABLE = {"train.epochs", "train.eval_every", "train.early_stop", "train.min_epochs",
             "train.eval", "train.eval_budget_mb", "sample.eval_batch_size", "sample.prefetch",
             "sample.peer_reads", "data.root", *(f"partition.{name}" for name in HOW_ONLY)}
"""Settings (besides the ``run`` section) that a resumed run may change: they change
neither the batches nor the updates of the epochs still to come."""


def dataset_slug(spec: str) -> str:
    """A short readable name of a dataset spec or path (``synthetic:sbm?..`` -> ``sbm``)."""
    if spec.startswith("synthetic:"):
        name = spec[len("synthetic:"):].split("?")[0]
    else:
        path = Path(spec.rstrip("/"))
        name = path.name.split(".")[0] if path.name else spec
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")[:40] or "run"


def default_out(name: str, base: str | Path = "runs") -> Path:
    """The first free ``runs/NAME[-N]``: absent or empty, and not being written."""
    stem = Path(base) / name
    out, n = stem, 1
    while (out.exists() and (not out.is_dir() or any(out.iterdir()))) or holder(out):
        n += 1
        out = stem.with_name(f"{stem.name}-{n}")
    return out


def run_files(cfg: Config) -> list[str]:
    """What a run of ``cfg`` writes into its directory besides ``record.json``."""
    files = [CONFIG_FILE, CHECKPOINT_DIR, *([BEST_DIR] if cfg.run.save_best else [])]
    if cfg.run.metrics is not None:
        files.append(METRICS_CSV if cfg.run.metrics == "csv" else TENSORBOARD_DIR)
    if cfg.run.save_predictions or cfg.run.save_embeddings is not None:
        files.append(PREDICTIONS_DIR)
    return files


def _listed(out: Path) -> list[str]:
    """What the record in ``out`` says the run wrote (a damaged record: every run file)."""
    from gnnpar.train.record import RunRecord

    try:
        record = RunRecord.load(out / RECORD_FILE)
    except ConfigError:
        return list(RUN_FILES)
    return [RECORD_FILE, *(record.files or RUN_FILES)]


def restore_replaced(out: str | os.PathLike[str] | None) -> bool:
    """Put back the run that ``--overwrite`` moved aside, if the new one never checkpointed.

    Call it when a run ends in failure (any rank, Ctrl-C), and before a run directory is
    used, holding its lock: a run killed before its first checkpoint leaves the old one
    aside.  Once the new run has a checkpoint, the old one is deleted instead
    (:func:`commit_replacement`).

    Returns:
        Whether the previous run was put back.
    """
    if out is None:
        return False
    path = Path(out)
    aside = path / PREVIOUS_RUN
    if not aside.is_dir():
        return False
    if (path / CHECKPOINT_DIR / STATE_FILE).is_file():  # committed; its deletion was cut
        shutil.rmtree(aside, ignore_errors=True)
        return False
    for name in _listed(path):
        _remove(path / name)
    for entry in path.iterdir():
        if TEMPORARY.match(entry.name):
            _remove(entry)
    for entry in aside.iterdir():
        os.rename(entry, path / entry.name)
    aside.rmdir()
    return True


def settle_for_reading(out: str | os.PathLike[str]) -> None:
    """Before a run directory is read: put back a run a killed ``--overwrite`` set aside.

    Raises:
        ConfigError: A ``gnnpar-train --overwrite`` is replacing the run right now (its
            old files wait in ``.previous-run`` until the new run's first checkpoint).
    """
    path = Path(out)
    if not (path / PREVIOUS_RUN).is_dir():
        return
    busy = holder(path)
    if busy is None:
        with contextlib.suppress(ConfigError), lock(path, ConfigError,
                                                    "this run directory"):
            restore_replaced(path)
            return
        busy = holder(path)
    if (path / PREVIOUS_RUN).is_dir() and not (path / CHECKPOINT_DIR / STATE_FILE).is_file():
        raise ConfigError(f"is being replaced by a running gnnpar-train --overwrite "
                          f"({busy or 'another process'}); the run it replaces waits in "
                          f"{PREVIOUS_RUN} until the new run's first checkpoint.",
                          path=path, field="run.out", fix="wait for the new run's first "
                          "checkpoint, or stop it (the old run is then put back).")


def commit_replacement(out: str | os.PathLike[str]) -> None:
    """Delete the run that ``--overwrite`` replaced (the new run has checkpointed)."""
    shutil.rmtree(Path(out) / PREVIOUS_RUN, ignore_errors=True)


def _remove(target: Path) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()


def prepare_run_dir(out: str | None, *, name: str, resume: bool = False,
                    overwrite: bool = False, hold: contextlib.ExitStack | None = None,
                    restart: bool = False) -> Path:
    """Settle the run directory before any work (see the module docstring).

    Call it once per run, in the process that starts it (the launcher, or rank 0).

    Args:
        out: ``--out``, or ``None`` for a new ``runs/NAME[-N]``.
        name: Name of a new run directory (e.g. ``sbm-sample``).
        resume: The run in ``out`` is continued (its checkpoint is checked by the caller,
            e.g. :func:`check_resume`).
        overwrite: The run in ``out`` is replaced: exactly what its record lists moves to
            ``OUT/.previous-run/`` until the new run's first checkpoint.
        hold: Where the directory's lock is kept until the run ends (``None``: held only
            while this function runs).
        restart: A launcher restarted the run's workers (:func:`prepare_restart`): the run
            in ``out`` is continued whatever ``resume`` and ``overwrite`` say.

    Returns:
        The directory to write to. It is created when the run writes its first file, so
        a run refused later (bad data, a failed start) leaves no directory behind.

    Raises:
        ConfigError: ``out`` holds a run and neither ``resume`` nor ``overwrite`` was
            given, holds something else, is a file or a link, lies inside another gnnpar
            directory, or another gnnpar process is writing it.
    """
    if out is None:
        while True:
            path = _creatable(default_out(name))
            try:
                return _claim(path, resume, overwrite, hold)
            except _Busy:
                continue  # another run took that name meanwhile: the next one
    return _claim(_checked_path(Path(out)), resume, overwrite, hold, restart)


class _Busy(ConfigError):
    """Another gnnpar process holds the run directory's lock."""


def _checked_path(path: Path) -> Path:
    if path.is_symlink():
        raise ConfigError("is a symbolic link; gnnpar writes a run only at a real path.",
                          path=path, field="run.out", fix="pass the real path as --out.")
    if path.exists() and not path.is_dir():
        raise ConfigError("is a file, not a directory.", path=path, field="run.out",
                          fix="pass another --out.")
    check_not_inside(path, ConfigError, "run.out")
    return _creatable(path)


def _claim(path: Path, resume: bool, overwrite: bool,
           hold: contextlib.ExitStack | None, restart: bool = False) -> Path:
    """Lock ``path`` (into ``hold``), then check it and move a replaced run aside."""
    with contextlib.ExitStack() as mine:
        keep = hold or mine
        made = _make_parents(path)  # the lock lies beside the run directory
        keep.callback(_remove_empty, made)  # a refused or finished run leaves none behind
        keep.enter_context(lock(path, _Busy, "this run directory"))
        _settle_locked(path, resume, overwrite, restart)
        return path


def prepare_restart(out: str | os.PathLike[str]) -> bool:
    """Before a launcher restarts a run's workers (it holds the directory's lock).

    The run continues from its newest complete checkpoint (one that a crash left between
    the two renames of its save is put back first; one being written when the failure hit
    was never renamed into place, so it is not it).  Without one (a failure before the
    run's first checkpoint), it starts over: what the failed start wrote is moved aside as
    ``--overwrite`` would, and a run that the original ``--overwrite`` replaced stays aside.

    Returns:
        Whether the restarted workers resume (``cfg.run.resume``).
    """
    return _settle_locked(Path(out), False, False, restart=True)


def _settle_locked(path: Path, resume: bool, overwrite: bool, restart: bool) -> bool:
    """Check ``path`` and move a replaced run aside (holding its lock); whether it resumes."""
    restore_replaced(path)
    if restart:
        recover_directory(path / CHECKPOINT_DIR)
        resume = (path / CHECKPOINT_DIR / STATE_FILE).is_file()
        overwrite = not resume
    if resume:
        return True
    if path.is_dir() and all(TEMPORARY.match(e.name) for e in path.iterdir()):
        for entry in path.iterdir():  # what a run killed before its record left
            _remove(entry)
    if path.is_dir() and any(path.iterdir()):
        bad, _ = RUN.foreign(path)
        if bad is not None:
            what = ("holds no gnnpar run record" if bad in (path, path / RECORD_FILE)
                    else f"holds {bad.relative_to(path)}, which is not a gnnpar run's")
            raise ConfigError(
                f"{what}; gnnpar does not write into a directory that is not a gnnpar "
                "run, nor delete what it did not write.", path=bad, field="run.out",
                fix="pass a new or empty --out.")
        if not overwrite:
            raise ConfigError(
                f"already holds a run ({_describe(path)}).", path=path,
                field="run.out", fix="continue it with --resume, replace it with "
                "--overwrite, or pass another --out.")
        aside = path / PREVIOUS_RUN
        aside.mkdir()
        for name in _listed(path):
            if (path / name).exists() or (path / name).is_symlink():
                os.rename(path / name, aside / name)
        for entry in path.iterdir():
            if TEMPORARY.match(entry.name):
                _remove(entry)
    return False


def _make_parents(path: Path) -> list[Path]:
    """Create the missing parents of ``path``; the ones created, deepest first."""
    missing = [p for p in path.parents if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    return missing


def _remove_empty(dirs: list[Path]) -> None:
    """Remove those of ``dirs`` that are empty (deepest first)."""
    for d in dirs:
        with contextlib.suppress(OSError):
            d.rmdir()


def check_run_dir(out: Path, resume: bool) -> None:
    """What a :class:`~gnnpar.train.trainer.Trainer` checks of its ``cfg.run.out`` (rank 0).

    The directory is absent, empty, holds only a run that ``--overwrite`` set aside, or
    (with ``resume``) a run; never anything gnnpar did not write.

    Raises:
        ConfigError: Naming the entry and the fix.
    """
    if not out.is_dir() or not any(out.iterdir()):
        return
    entries = {e.name for e in out.iterdir() if not TEMPORARY.match(e.name)}
    if entries <= {PREVIOUS_RUN}:
        bad, _ = RUN.parts[PREVIOUS_RUN].foreign(out / PREVIOUS_RUN) if entries else (None, "")
    else:
        bad, _ = RUN.foreign(out)
    if bad is not None:
        raise ConfigError("is not gnnpar's; the Trainer writes only into a new or empty "
                          "directory or a run directory.", path=bad, field="run.out",
                          fix="set cfg.run.out to a new directory.")
    if not resume and entries - {PREVIOUS_RUN}:
        raise ConfigError(f"already holds a run ({_describe(out)}).", path=out,
                          field="run.out", fix="resume it (cfg.run.resume), or prepare it "
                          "with gnnpar.train.rundir.prepare_run_dir(..., overwrite=True).")


def _creatable(path: Path) -> Path:
    """``path``, once sure it can be created: its first existing ancestor a writable directory.

    Raises:
        ConfigError: Naming why it cannot.
    """
    ancestor = path
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    why = ("" if ancestor.is_dir() and os.access(ancestor, os.W_OK | os.X_OK) else
           f"{ancestor} is not a directory" if not ancestor.is_dir() else
           f"{ancestor} is not writable")
    if why:
        raise ConfigError(f"cannot be created ({why}).", path=path, field="run.out",
                          fix="pass an --out under a writable directory (every part of the "
                          "path a directory).")
    return path


def _describe(out: Path) -> str:
    """``"3 epochs, status complete"`` of the record in ``out``, as far as it is readable."""
    from gnnpar.train.record import RunRecord

    try:
        record = RunRecord.load(out / RECORD_FILE)
    except ConfigError:
        return "a checkpoint" if (out / CHECKPOINT_DIR).exists() else "run files"
    return f"{len(record.epochs)} epochs, status {record.status}"


def _flat(doc: dict[str, Any]) -> dict[str, Any]:
    return {f"{s}.{k}": v for s, body in doc.items() if isinstance(body, dict)
            for k, v in body.items()}


def check_resume(out: Path, cfg: Config, partition_dir: str | None = None) -> None:
    """Refuse to resume ``out`` unless its checkpoint exists and the run is the same.

    Every setting outside the ``run`` section and :data:`RESUMABLE` must equal the
    checkpoint's; the checkpoint's position must lie within its run (its finished epochs
    recorded, mid-epoch sums only mid-epoch, not past the run's ``--epochs``); ``--epochs``
    must exceed the position's epoch; and, given ``partition_dir``, the partition must be
    the one the checkpoint was trained on (its content digest, wherever it lies).

    Raises:
        ConfigError: Nothing to resume, the settings that differ (each with its flag and
            both values), a position outside the run, or another partition.
    """
    from gnnpar.train.checkpoint import read_state

    ckpt = out / CHECKPOINT_DIR
    if not (ckpt / STATE_FILE).is_file():
        raise ConfigError("holds no checkpoint to resume from.", path=out, field="run.resume",
                          fix="drop --resume to start the run, or pass the --out of the run "
                          "to continue.")
    extra = read_state(ckpt)["extra"]
    saved = extra.get("config")
    if not isinstance(saved, dict):
        raise ConfigError("the checkpoint holds no configuration.", path=ckpt,
                          field="config", fix="resume a checkpoint written by gnnpar-train.")
    now, before = _flat(cfg.to_dict()), _flat(saved)
    secs = sections(Config)
    changed = []
    for path in sorted(set(now) | set(before)):
        section, name = path.split(".")
        if section == "run" or path in RESUMABLE or now.get(path) == before.get(path):
            continue
        changed.append(f"{flag_of(secs[section], name)} {before.get(path)!r} -> "
                       f"{now.get(path)!r}")
    if changed:
        raise ConfigError(
            "the run in OUT was started with other settings: " + "; ".join(changed) + ".",
            path=out, field="run.resume",
            fix=f"resume with the run's own settings (--config {out / CONFIG_FILE}, then the "
            "flags you may change: --epochs, --eval-every, --early-stop, --min-epochs, "
            "--eval, --eval-budget-mb and the run section), or start a new run (another --out, or "
            "--overwrite).")
    epoch, step = saved_position(ckpt, extra)
    if cfg.train.epochs <= epoch:
        where = (f"is at step {step} of epoch {epoch + 1}" if step else
                 f"has finished {epoch} epochs")
        short = "trains nothing more" if cfg.train.epochs == epoch and not step else \
            "is below its position"
        raise ConfigError(f"the run {where}, so --epochs {cfg.train.epochs} {short}.",
                          path=out, field="train.epochs",
                          fix=f"pass --epochs above {epoch} to continue it.")
    if partition_dir is not None:
        from gnnpar.partition.format import content_digest

        digest = content_digest(partition_dir)
        if extra.get("partition_digest") != digest:
            raise ConfigError(
                f"the checkpoint was trained on a partition of content digest "
                f"{str(extra.get('partition_digest'))[:12]}..., and {partition_dir} now "
                f"holds another ({digest[:12]}...).", path=ckpt, field="partition_digest",
                fix="resume on the partition the run was trained on, or start a new run "
                "(another --out, or --overwrite).")


def saved_position(ckpt: Path, extra: dict[str, Any]) -> tuple[int, int]:
    """``(epoch, step)`` of a checkpoint's next step, checked against the rest of it.

    The epochs recorded must be exactly those before the position, the per-rank sums of
    an unfinished epoch finite numbers present exactly when the step is not 0, and the
    position within the saved run's ``--epochs``.

    Raises:
        ConfigError: Naming ``state.json`` and the field.
    """
    raw = extra.get("position")
    pos = raw if isinstance(raw, dict) else {}
    epochs = extra.get("epochs") if isinstance(extra.get("epochs"), list) else None
    partial = extra.get("partial") if isinstance(extra.get("partial"), list) else None
    total: Any = (extra.get("config") or {}).get("train", {}).get("epochs")

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    epoch: Any = pos.get("epoch")
    step: Any = pos.get("step")
    ok = (count(epoch) and count(step) and count(total) and epochs is not None
          and partial is not None and len(epochs) == epoch and (step > 0) == bool(partial)
          and (epoch < total or (epoch == total and step == 0))
          and all(isinstance(e, dict) and e.get("epoch") == i for i, e in enumerate(epochs))
          and all(isinstance(r, dict) and all(
              isinstance(v, int | float) and math.isfinite(v) for v in r.values())
              for r in partial))
    if not ok:
        raise ConfigError(
            f"the saved position {raw!r:.80} does not fit the run it belongs to "
            f"({'?' if epochs is None else len(epochs)} finished epochs recorded of "
            f"{total!r}).", path=ckpt / "state.json", field="position",
            fix="resume from an undamaged copy of the run, or start anew (--overwrite).")
    return int(epoch), int(step)
