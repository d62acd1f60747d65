"""Directories written aside and renamed into place, one writer at a time.

:func:`atomic_directory` yields a fresh temporary sibling of the output that becomes the
output only when the block succeeds; the previous version is moved aside first and
removed once the new one is in place (:func:`replace_directory`), and put back by
:func:`recover_directory` after a crash between the two renames.  A write that several
processes share (one shard per rank) uses :func:`open_staging` and :func:`commit_staging`
under a lock its caller holds.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gnnpar.artifacts.files import FULL_DISK, storage_error
from gnnpar.artifacts.kinds import ArtifactKind
from gnnpar.artifacts.lock import lock
from gnnpar.artifacts.ownership import OVERWRITE_HINT, check_output_dir
from gnnpar.errors import GnnparError, StorageError


@contextlib.contextmanager
def atomic_directory(
    out_dir: str | os.PathLike[str],
    overwrite: bool = False,
    error: type[GnnparError] = GnnparError,
    overwrite_hint: str = OVERWRITE_HINT,
    kind: ArtifactKind | None = None,
    field: str = "out",
) -> Iterator[Path]:
    """Yield a fresh temporary directory that becomes ``out_dir`` when the block succeeds.

    One writer at a time: a second process writing the same ``out_dir`` meanwhile fails
    within half a second, naming the first (:func:`~gnnpar.artifacts.lock.lock`), and temporary
    directories that an earlier, killed writer left are removed.

    Args:
        out_dir: Final location.
        overwrite: Replace an existing ``out_dir``; the old one is removed only after the
            new one is complete, and only when it is wholly gnnpar's (checked again then).
        error: Exception type raised when ``out_dir`` may not be written.
        overwrite_hint: The fix named when ``out_dir`` exists and ``overwrite`` is not set.
        kind: The kind of directory written (see
            :func:`~gnnpar.artifacts.ownership.check_output_dir`).
        field: The argument named in errors.

    Yields:
        The temporary directory to write into (a sibling of ``out_dir``).
    """
    out = Path(out_dir)
    check_output_dir(out, overwrite, kind, error, overwrite_hint, field=field)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise error(f"cannot be created ({exc.strerror or exc}).", path=out, field=field,
                    fix="write under a writable directory (every part of the path a "
                    "directory).") from None
    with lock(out, error):
        recover_directory(out)
        check_output_dir(out, overwrite, kind, error, overwrite_hint, field=field)
        remove_temporaries(out)
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        except OSError as exc:
            raise storage_error(exc, out.parent, 0, out.name) from None
        try:
            yield tmp
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, StorageError):
                raise
            if exc.errno in FULL_DISK:
                raise error(f"cannot be written ({exc.strerror}); nothing was replaced.",
                            path=out, fix="free space on that file system, or write to "
                            "another one.") from exc
            raise
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        try:  # what appeared meanwhile, not through this lock, is never replaced either
            check_output_dir(out, overwrite, kind, error, overwrite_hint, field=field)
        except GnnparError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        replace_directory(tmp, out)


def remove_temporaries(out: str | os.PathLike[str]) -> None:
    """Remove the temporary siblings a killed writer of ``out`` left (hold its lock)."""
    out = Path(out)
    for stale in out.parent.glob(f".{glob.escape(out.name)}.tmp-*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)


def replace_directory(tmp: str | os.PathLike[str], out: str | os.PathLike[str]) -> None:
    """Rename the complete directory ``tmp`` to ``out``, replacing any existing ``out``.

    The old ``out`` is moved aside first (to ``.OUT.old-*/d``) and removed only once
    ``tmp`` is in place.  On failure ``tmp`` is removed and the old ``out``, if any, is
    put back; after a crash between the two renames :func:`recover_directory` puts it
    back.

    Args:
        tmp: The finished directory (a sibling of ``out``, so renames stay on one device).
        out: Final location.
    """
    tmp, out = Path(tmp), Path(out)
    aside = None
    try:
        if out.exists():
            aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent)) / "d"
            os.rename(out, aside)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if aside is not None:
            if aside.exists():
                os.rename(aside, out)  # put the previous directory back
            shutil.rmtree(aside.parent, ignore_errors=True)
        raise
    if aside is not None:
        shutil.rmtree(aside.parent, ignore_errors=True)


def recover_directory(out: str | os.PathLike[str]) -> None:
    """Undo what a crash inside :func:`replace_directory` left of ``out``.

    A missing ``out`` whose previous version was moved aside gets it back; asides left
    beside an ``out`` that is in place are removed.  Call it only where no other process
    is replacing ``out`` at the same time.
    """
    out = Path(out)
    asides = sorted(out.parent.glob(f".{glob.escape(out.name)}.old-*"))
    if not out.exists():
        for aside in asides:
            if (aside / "d").is_dir():
                os.rename(aside / "d", out)
                break
    for aside in asides:
        shutil.rmtree(aside, ignore_errors=True)


def staging_dir(out: str | os.PathLike[str]) -> Path:
    """Where several processes write ``out`` before it is renamed into place."""
    p = Path(out)
    return p.parent / f".{p.name}.tmp-ranks"


def open_staging(out: str | os.PathLike[str]) -> Path:
    """Make a fresh :func:`staging_dir` of ``out`` (one process, holding ``out``'s lock).

    Raises:
        StorageError: The file system refused it.
    """
    stage = staging_dir(out)
    try:
        recover_directory(out)
        remove_temporaries(out)
        stage.mkdir(parents=True)
    except OSError as exc:
        raise storage_error(exc, stage.parent, 0, Path(out).name) from None
    return stage


def commit_staging(out: str | os.PathLike[str], kind: ArtifactKind,
                   error: type[GnnparError]) -> None:
    """Rename the complete staging directory into ``out`` (one process, holding the lock).

    An existing ``out`` is replaced only when it is wholly gnnpar's ``kind``.
    """
    out = Path(out)
    if out.exists():
        bad, why = kind.foreign(out) if out.is_dir() and not out.is_symlink() else (
            out, "is not a directory gnnpar wrote, so it is never replaced.")
        if bad is not None:
            shutil.rmtree(staging_dir(out), ignore_errors=True)
            raise error(why, path=bad, field="out",
                        fix=f"move {bad} away yourself, then write the outputs again.")
    replace_directory(staging_dir(out), out)
