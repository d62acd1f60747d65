"""Files written aside and renamed into place, their digests, and what a full disk says.

A file is written to a temporary sibling (``.NAME.tmp-PID``) and renamed over its final
name only when complete, so a crash or a full disk leaves the previous version (or
nothing) and never half a file.  A write that the file system refuses (full, read-only,
not writable) raises :class:`~gnnpar.errors.StorageError` naming the directory, the bytes
needed and the free space, and leaves no temporary file.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gnnpar.errors import StorageError

FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)
"""Write errors that mean the file system cannot take the output."""
DIGEST_KEY = "digest"
"""The field of a self-digested JSON document that holds its SHA-256."""


def storage_error(exc: OSError, directory: str | os.PathLike[str], needed: int,
                  what: str) -> StorageError:
    """The error of an output that could not be written, naming where and the bytes needed.

    Args:
        exc: What the write raised.
        directory: The directory written into.
        needed: Bytes the output needs (0: unknown).
        what: The output, e.g. ``"the checkpoint"``.
    """
    try:
        free = f"{shutil.disk_usage(directory).free:,} bytes are free there"
    except OSError:
        free = "the free space there is unknown"
    full = exc.errno in FULL_DISK and exc.errno != errno.EROFS
    need = f"it needs {needed:,} bytes, {free}; " if needed else f"{free}; "
    return StorageError(
        f"{what} cannot be written ({exc.strerror or exc}): {need}nothing was replaced "
        "and no temporary file is left.", path=directory,
        fix=("free space on that file system, or write to another one." if full
             else "make the directory writable, or write to another one."))


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], what: str | None = None,
                needed: int = 0) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` that replaces ``path`` when the block succeeds.

    Args:
        path: The final file.
        what: The output in a storage error (default: the file's name).
        needed: Its size, when known (named in a storage error).

    Raises:
        StorageError: The file system refused the write (nothing replaced, nothing left).
    """
    out = Path(path)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except OSError as exc:
        size = needed
        with contextlib.suppress(OSError):
            size = max(size, tmp.stat().st_size)
            tmp.unlink()
        raise storage_error(exc, out.parent, size, what or out.name) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def remove_stale_temporaries(path: str | os.PathLike[str]) -> None:
    """Remove the temporary files a killed writer of ``path`` left (hold its lock)."""
    out = Path(path)
    for stale in out.parent.glob(f".{glob.escape(out.name)}.tmp-*"):
        if stale.is_file() and not stale.is_symlink():
            with contextlib.suppress(OSError):
                stale.unlink()


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_file`."""
    with atomic_file(path, needed=len(data)) as tmp, open(tmp, "wb") as f:
        f.write(data)


def json_text(obj: Any) -> bytes:
    """``obj`` as gnnpar writes JSON: indented, keys sorted, a final newline, UTF-8."""
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as JSON through :func:`atomic_file`."""
    write_bytes_atomic(path, json_text(obj))


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as JSON into a file of a directory that is itself written aside."""
    Path(path).write_bytes(json_text(obj))


def json_digest(doc: dict[str, Any]) -> str:
    """Hex SHA-256 of ``doc`` without its :data:`DIGEST_KEY` (sorted keys, compact)."""
    body = {k: v for k, v in doc.items() if k != DIGEST_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def digested(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its own digest, so that damage to the file is detected on read."""
    return {**doc, DIGEST_KEY: json_digest(doc)}


def write_digested_json(path: str | os.PathLike[str], doc: dict[str, Any],
                        atomic: bool = True) -> None:
    """Write ``doc`` with its digest (through :func:`atomic_file` unless ``atomic=False``)."""
    (write_json_atomic if atomic else write_json)(path, digested(doc))


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_entry(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``{"sha256", "bytes"}`` of a file: how a marker lists a file it owns."""
    return {"sha256": sha256_file(path), "bytes": os.path.getsize(path)}


def content_stamp(path: str | os.PathLike[str], block: int = 1 << 20) -> str:
    """A quick digest of a file's content, for cache keys.

    All of a file up to 8 blocks, else its first, middle and last block, with its size
    (:func:`sha256_file` reads everything).
    """
    size = os.path.getsize(path)
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        if size <= 8 * block:
            h.update(f.read())
        else:
            for start in (0, (size - block) // 2, size - block):
                f.seek(start)
                h.update(f.read(block))
    return h.hexdigest()
