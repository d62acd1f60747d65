"""Checks every reader of a gnnpar artifact makes before it uses what it read.

Counts from a document are integers in range before they size anything
(:func:`count_field`), weights are finite before a model gets them (:func:`check_finite`),
and a file's digest and size match what its marker lists before its bytes are used
(:func:`check_listed_file`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.artifacts.files import sha256_file
from gnnpar.errors import GnnparError


def count_field(doc: Mapping[str, Any], key: str, path: str | os.PathLike[str],
                error: type[GnnparError], fix: str, *, low: int = 0,
                high: int = 1 << 40) -> int:
    """``doc[key]`` as an ``int`` in ``[low, high]``, else ``error`` naming the field.

    ``high`` bounds what any one machine holds (2**40 nodes, rows, classes): larger values
    are damage, not data, and are refused before they size an allocation.
    """
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = f"{value!r}"[:40] if key in doc else "missing"
        raise error(f"is {shown}; expected an integer in [{low:,}, {high:,}].", path=path,
                    field=key, fix=fix)
    return value


def check_finite(values: Mapping[str, Any], path: str | os.PathLike[str],
                 error: type[GnnparError], fix: str) -> None:
    """Raise ``error`` naming the first floating tensor or array with a NaN or infinity.

    Args:
        values: ``name -> torch.Tensor or numpy array``.
        path: The file they came from.
        error: The exception type.
        fix: What to do about it.
    """
    import torch

    for key, v in values.items():
        if isinstance(v, torch.Tensor):
            bad = v.is_floating_point() and not bool(torch.isfinite(v).all())
        else:
            a = np.asarray(v)
            bad = a.dtype.kind == "f" and not bool(np.isfinite(a).all())
        if bad:
            raise error(f"{key!r} holds a NaN or infinite value: the model that wrote it had "
                        "diverged or the file was damaged.", path=path, field=key, fix=fix)


def check_listed_file(path: Path, entry: Any, error: type[GnnparError], fix: str,
                      field: str = "files") -> None:
    """Raise unless ``path`` has the size and SHA-256 its marker lists (``entry``).

    Args:
        path: The file.
        entry: ``{"sha256": hex, "bytes": int}`` from the marker.
        error: The exception type.
        fix: What to do about a mismatch.
        field: The marker's field named in errors.
    """
    if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or \
            isinstance(entry.get("bytes"), bool) or not isinstance(entry.get("bytes"), int):
        raise error(f"its entry in the marker is {entry!r:.80}, not a size and a SHA-256.",
                    path=path, field=field, fix=fix)
    if not path.is_file() or path.is_symlink():
        raise error("file listed in the marker is missing.", path=path, field=field, fix=fix)
    size = path.stat().st_size
    if size != entry["bytes"]:
        raise error(f"is {size:,} bytes, the marker lists {entry['bytes']:,}: it was "
                    "truncated, replaced or damaged.", path=path, field=field, fix=fix)
    if sha256_file(path) != entry["sha256"]:
        raise error("its SHA-256 differs from the marker's: the file was changed, swapped "
                    "or damaged.", path=path, field=field, fix=fix)


def list_files(directory: Path, marker: str) -> dict[str, Any]:
    """``{relative path: {"sha256", "bytes"}}`` of every file of ``directory`` but ``marker``.

    What a marker written last (inside a directory that is itself written aside) lists,
    so that :func:`check_files` finds any later change.
    """
    from gnnpar.artifacts.files import file_entry

    return {str(p.relative_to(directory)): file_entry(p)
            for p in sorted(directory.rglob("*")) if p.is_file() and p.name != marker}


def check_files(directory: Path, files: Any, marker: Path, error: type[GnnparError],
                fix: str) -> None:
    """Raise unless every file ``files`` lists has its listed size and SHA-256.

    Args:
        directory: Where the files lie.
        files: The marker's ``files`` field (:func:`list_files`).
        marker: The marker, named when ``files`` is malformed.
        error: The exception type.
        fix: What to do about a mismatch.
    """
    if not isinstance(files, dict):
        raise error("files must map every file to its size and SHA-256.", path=marker,
                    field="files", fix=fix)
    for rel, entry in files.items():
        if not isinstance(rel, str) or rel.startswith("/") or ".." in Path(rel).parts:
            raise error(f"lists {rel!r}, which is not a file inside the directory.",
                        path=marker, field="files", fix=fix)
        check_listed_file(directory / rel, entry, error, fix)
