"""Whether gnnpar may write an output: never over, into or through what it did not write.

:func:`check_output_dir` and :func:`check_output_files` run before any work starts (and
again just before the rename): an output that is a symbolic link, lies inside another
gnnpar artifact, or exists and is not wholly gnnpar's of the same kind is refused with one
error naming the path and the fix; one that is gnnpar's is replaced only under
``--overwrite``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from gnnpar.artifacts.kinds import ArtifactKind, enclosing
from gnnpar.errors import GnnparError

OVERWRITE_HINT = "pass --overwrite (overwrite=True) or choose another path."


def check_not_inside(out: Path, error: type[GnnparError], field: str,
                     allowed: ArtifactKind | None = None) -> None:
    """Refuse an output inside a gnnpar artifact (other than one of kind ``allowed``)."""
    found = enclosing(out)
    if found is not None and found[0] is not allowed:
        kind, where = found
        raise error(f"lies inside {kind.name} ({where}), which holds only the files gnnpar "
                    "wrote there.", path=out, field=field,
                    fix="write it outside that directory.")


def check_output_dir(out: str | os.PathLike[str], overwrite: bool,
                     kind: ArtifactKind | None, error: type[GnnparError] = GnnparError,
                     overwrite_hint: str = OVERWRITE_HINT, *, field: str = "out",
                     empty_ok: bool = False, inside: ArtifactKind | None = None) -> None:
    """Refuse an ``out`` that gnnpar may not (re)write as ``kind``.

    Args:
        out: The output directory.
        overwrite: Whether replacing it was asked for.
        kind: The kind written there: a non-empty ``out`` is replaced only when it holds
            this kind's marker and nothing the marker does not list (``None``: any).
        error: The exception type raised.
        overwrite_hint: The fix named when ``out`` exists and ``overwrite`` is not set.
        field: The argument named in errors.
        empty_ok: An existing empty directory is used without ``overwrite``.
        inside: The kind of artifact ``out`` may lie inside (a run's predictions).
    """
    p = Path(out)
    if p.is_symlink():
        raise error("is a symbolic link; gnnpar writes outputs only at real paths, so it "
                    "never writes through a link into what it points to.", path=p,
                    field=field, fix="pass the real path, or another output.")
    check_not_inside(p, error, field, inside)
    if not p.exists():
        return
    if not p.is_dir():
        raise error("is a file, not a directory.", path=p, field=field,
                    fix="choose another output directory.")
    if empty_ok and not any(p.iterdir()):
        return
    if not overwrite:
        raise error("the output directory already exists.", path=p, field=field,
                    fix=overwrite_hint)
    if kind is not None and any(p.iterdir()):
        bad, why = kind.foreign(p)
        if bad is not None:
            raise error(why, path=bad, field=field,
                        fix=f"choose a new output directory, or move {bad} away yourself.")


def check_output_files(files: Sequence[Path], overwrite: bool,
                       owned: Callable[[Path], bool], error: type[GnnparError], *,
                       field: str = "out", what: str = "an output",
                       overwrite_hint: str = OVERWRITE_HINT) -> None:
    """Refuse to write ``files`` over anything gnnpar did not write as this output.

    Args:
        files: Every file the output writes (a model and its description, say).
        overwrite: Whether replacing an earlier output was asked for.
        owned: Whether an existing file is one gnnpar wrote as this kind of output.
        error: The exception type raised.
        field: The argument named in errors.
        what: The output in messages (``"an exported model"``).
        overwrite_hint: The fix named when they exist and ``overwrite`` is not set.
    """
    for f in files:
        if f.is_symlink():
            raise error("is a symbolic link; gnnpar never writes through a link.", path=f,
                        field=field, fix="pass another output path.")
        if f.is_dir():
            raise error("is a directory.", path=f, field=field,
                        fix="name a file, e.g. DIR/model.pt.")
        check_not_inside(f, error, field)
    existing = [f for f in files if f.exists()]
    for f in existing:
        if not owned(f):
            raise error(f"exists and was not written by gnnpar as {what}, so it is never "
                        "replaced.", path=f, field=field,
                        fix="choose another output path, or move the file away yourself.")
    if existing and not overwrite:
        raise error(f"already exists ({what} written earlier).", path=existing[0],
                    field=field, fix=overwrite_hint)
