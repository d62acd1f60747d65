"""The run directory: where a run's record and checkpoints go, and what may replace them.

A run writes ``OUT/record.json`` (:mod:`gnnpar.train.record`), ``OUT/config.json`` (its
resolved configuration, a ``--config`` file that repeats the run) and ``OUT/checkpoint/``.
Before any work starts, :func:`prepare_run_dir` settles ``OUT``:

* no ``--out``: a new ``runs/DATASET-MODE``, numbered ``-2``, ``-3``, ... when taken, so
  the same command run twice keeps both runs;
* ``--out`` absent or an empty directory: used;
* ``--out`` holding a run: continued with ``--resume`` (its checkpoint, with the same
  settings: :func:`check_resume` names every setting that differs), replaced with
  ``--overwrite`` (only gnnpar's own files are removed), otherwise refused;
* ``--out`` holding anything else, or a file: refused, even with ``--overwrite``.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from gnnpar.config import flag_of, sections
from gnnpar.errors import ConfigError
from gnnpar.partition.config import HOW_ONLY
from gnnpar.train.config import Config
from gnnpar.train.record import RECORD_FILE

CONFIG_FILE = "config.json"
CHECKPOINT_DIR = "checkpoint"
RUN_FILES = (RECORD_FILE, CONFIG_FILE, CHECKPOINT_DIR)
"""What a run writes into its directory (and what ``--overwrite`` removes)."""

RESUMABLE = {"train.epochs", "train.eval_every", "train.eval", "train.eval_budget_mb",
             "sample.eval_batch_size", "sample.prefetch",
             "data.root", *(f"partition.{name}" for name in HOW_ONLY)}
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
    """The first free (absent or empty) ``runs/NAME[-N]``."""
    stem = Path(base) / name
    out, n = stem, 1
    while out.exists() and (not out.is_dir() or any(out.iterdir())):
        n += 1
        out = stem.with_name(f"{stem.name}-{n}")
    return out


def holds_run(out: Path) -> bool:
    """Whether ``out`` holds a run's files."""
    return any((out / name).exists() for name in RUN_FILES)


def prepare_run_dir(out: str | None, *, name: str, resume: bool = False,
                    overwrite: bool = False) -> Path:
    """Settle the run directory before any work (see the module docstring).

    Call it once per run, in the process that starts it (the launcher, or rank 0).

    Args:
        out: ``--out``, or ``None`` for a new ``runs/NAME[-N]``.
        name: Name of a new run directory (e.g. ``sbm-sample``).
        resume: The run in ``out`` is continued (its checkpoint is checked by the caller,
            e.g. :func:`check_resume`).
        overwrite: The run in ``out`` is replaced.

    Returns:
        The directory to write to. It is created when the run writes its first file, so
        a run refused later (bad data, a failed start) leaves no directory behind.

    Raises:
        ConfigError: ``out`` holds a run and neither ``resume`` nor ``overwrite`` was
            given, holds something else, or is a file.
    """
    if out is None:
        return _creatable(default_out(name))
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ConfigError("is a file, not a directory.", path=path, field="run.out",
                          fix="pass another --out.")
    if resume:
        return path
    if path.is_dir() and any(path.iterdir()):
        others = sorted(p.name for p in path.iterdir() if p.name not in RUN_FILES)
        if not holds_run(path) or others:
            raise ConfigError(
                f"holds files that are not a gnnpar run ({', '.join(others[:5])}); gnnpar "
                "does not write into or delete them.", path=path, field="run.out",
                fix="pass a new or empty --out.")
        if not overwrite:
            raise ConfigError(
                f"already holds a run ({_describe(path)}).", path=path, field="run.out",
                fix="continue it with --resume, replace it with --overwrite, or pass "
                "another --out.")
        for entry in RUN_FILES:
            target = path / entry
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    return _creatable(path)


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


def check_resume(out: Path, cfg: Config) -> None:
    """Refuse to resume ``out`` unless its checkpoint exists and the run is the same.

    Every setting outside the ``run`` section and :data:`RESUMABLE` must equal the
    checkpoint's; ``--epochs`` must exceed the epochs already finished.

    Raises:
        ConfigError: Nothing to resume, or the settings that differ, each with its flag
            and both values.
    """
    from gnnpar.train.checkpoint import read_state

    ckpt = out / CHECKPOINT_DIR
    if not (ckpt / "state.json").is_file():
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
            "flags you may change: --epochs, --eval-every, --eval, --eval-budget-mb and the "
            "run section), or start a new run (another --out, or --overwrite).")
    done = len(extra.get("epochs", []))
    if cfg.train.epochs <= done and not extra.get("partial"):
        raise ConfigError(
            f"the run has finished {done} epochs, so --epochs {cfg.train.epochs} trains "
            "nothing more.", path=out, field="train.epochs",
            fix=f"pass --epochs above {done} to continue it.")
