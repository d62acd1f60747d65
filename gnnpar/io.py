"""Safe file helpers shared by every stage: atomic directories, ``.npy`` and JSON I/O.

Outputs are written into a temporary sibling directory and renamed into place only when
complete, so an interrupted or failed write never leaves a half-written directory and
never destroys the previous one.  Arrays are read with ``allow_pickle=False`` and, by
default, memory-mapped.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import hashlib
import io
import json
import mmap
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.errors import GnnparError, StorageError

_FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)
"""Write errors that mean the file system cannot take the output."""


@contextlib.contextmanager
def _exclusive(out: Path, error: type[GnnparError]) -> Iterator[None]:
    """Hold ``.OUT.lock`` beside ``out`` (non-blocking ``flock``): one writer at a time."""
    lock = out.parent / f".{out.name}.lock"
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise error("another process is writing this directory right now.", path=out,
                        fix="wait for it to finish, or choose another output.") from None
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(lock)  # while still held: a later writer makes a new one
    finally:
        os.close(fd)


@dataclass(frozen=True)
class OutputKind:
    """A kind of directory that gnnpar writes, and how to tell what in one it wrote.

    Attributes:
        marker: The JSON file every directory of this kind holds (``meta.json``).
        name: The kind's name in messages (``"a partition directory"``).
        listing: The marker's parsed JSON -> the relative paths of every other file that
            gnnpar wrote there; raises ``KeyError``, ``TypeError`` or ``ValueError`` when
            the document lists none.
    """

    marker: str
    name: str
    listing: Callable[[Any], Iterable[str]]

    def foreign(self, out: Path) -> tuple[Path | None, str]:
        """The first entry of ``out`` that gnnpar did not write as this kind, and why.

        Returns:
            ``(None, "")`` when ``out`` holds only the marker and files it lists (some
            may be missing: a damaged directory is still replaced), else the offending
            path and a sentence on it.
        """
        marker = out / self.marker
        if not marker.is_file():
            return out, f"is not {self.name} (no {self.marker}), so it is never replaced."
        try:
            listed = {os.path.normpath(rel) for rel in self.listing(
                json.loads(marker.read_bytes().decode("utf-8")))}
        except (AttributeError, KeyError, TypeError, ValueError, OSError):
            return marker, (f"is not the {self.marker} of {self.name} that lists its files, "
                            "so the directory is never replaced.")
        listed.add(self.marker)
        parents = {str(parent) for rel in listed for parent in Path(rel).parents}
        for path in sorted(out.rglob("*")):
            rel = str(path.relative_to(out))
            if path.is_dir() and not path.is_symlink() and rel in parents:
                continue
            if rel not in listed or not path.is_file() or path.is_symlink():
                return path, (f"was not written by gnnpar as part of {self.name} (its "
                              f"{self.marker} does not list it), so the directory is never "
                              "replaced.")
        return None, ""


def check_output_dir(out: str | os.PathLike[str], overwrite: bool,
                     kind: OutputKind | None, error: type[GnnparError] = GnnparError,
                     overwrite_hint: str = "pass overwrite=True (CLI: --overwrite) or "
                     "choose another path.") -> None:
    """Refuse an ``out`` that exists, unless ``overwrite`` and it is wholly gnnpar's.

    Args:
        out: The output directory.
        overwrite: Whether replacing it was asked for.
        kind: The kind of directory written there: a non-empty ``out`` is replaced only
            when it holds this kind's marker and nothing the marker does not list.
            ``None``: any directory.
        error: The exception type raised.
        overwrite_hint: The fix named when ``out`` exists and ``overwrite`` is not set.
    """
    p = Path(out)
    if not p.exists():
        return
    if not p.is_dir():
        raise error("is a file, not a directory.", path=p, field="out",
                    fix="choose another output directory.")
    if not overwrite:
        raise error("the output directory already exists.", path=p, field="out",
                    fix=overwrite_hint)
    if kind is not None and any(p.iterdir()):
        bad, why = kind.foreign(p)
        if bad is not None:
            raise error(why, path=bad, field="out",
                        fix=f"choose a new output directory, or move {bad} away yourself.")


@contextlib.contextmanager
def atomic_directory(
    out_dir: str | os.PathLike[str],
    overwrite: bool = False,
    error: type[GnnparError] = GnnparError,
    overwrite_hint: str = "pass overwrite=True (CLI: --overwrite) or choose another path.",
    kind: OutputKind | None = None,
) -> Iterator[Path]:
    """Yield a fresh temporary directory that becomes ``out_dir`` when the block succeeds.

    One writer at a time: a second process writing the same ``out_dir`` meanwhile fails
    at once (a lock file beside it), and temporary directories that an earlier, killed
    writer left are removed.

    Args:
        out_dir: Final location.
        overwrite: Replace an existing ``out_dir``; the old one is removed only after the
            new one is complete, and only when it is wholly gnnpar's (checked again then).
        error: Exception type raised when ``out_dir`` exists and ``overwrite`` is False,
            or another process is writing it.
        overwrite_hint: The fix named in that error.
        kind: The kind of directory written (see :func:`check_output_dir`): a directory
            holding anything else is never replaced.

    Yields:
        The temporary directory to write into (a sibling of ``out_dir``).
    """
    out = Path(out_dir)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise error(f"cannot be created ({exc.strerror or exc}).", path=out, field="out",
                    fix="write under a writable directory (every part of the path a "
                    "directory).") from None
    with _exclusive(out, error):
        recover_directory(out)
        check_output_dir(out, overwrite, kind, error, overwrite_hint)
        for stale in out.parent.glob(f".{glob.escape(out.name)}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)  # a killed writer's (we hold the lock)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            yield tmp
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if exc.errno in _FULL_DISK:
                raise error(f"cannot be written ({exc.strerror}); nothing was replaced.",
                            path=out, fix="free space on that file system, or write to "
                            "another one.") from exc
            raise
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        try:  # what appeared meanwhile, not through this lock, is never replaced either
            if out.exists() and not overwrite:
                raise error("the output directory appeared while it was being written.",
                            path=out, fix=overwrite_hint)
            check_output_dir(out, overwrite, kind, error, overwrite_hint)
        except GnnparError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        replace_directory(tmp, out)


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


def load_npy(
    path: str | os.PathLike[str],
    mmap: bool = True,
    error: type[GnnparError] = GnnparError,
) -> np.ndarray:
    """Read one ``.npy`` file, never unpickling, with a clear error when it is damaged.

    Args:
        path: File to read.
        mmap: Memory-map read-only instead of reading into memory.
        error: Exception type to raise for a missing or damaged file.
    """
    p = Path(path)
    if not p.is_file():
        raise error("file is missing.", path=p, fix="re-create the directory that holds it.")
    try:
        array: np.ndarray = np.load(p, mmap_mode="r" if mmap else None, allow_pickle=False)
        return array
    except ValueError as exc:
        raise error(
            f"not a readable .npy array ({exc}); it may be truncated or hold Python objects.",
            path=p,
            fix="re-create the directory that holds it.",
        ) from exc
    except OSError as exc:
        raise error(f"cannot read ({exc}).", path=p, fix="check the file's permissions.") from exc


def release(array: np.ndarray) -> None:
    """Drop the pages of a read-only memory map from this process (its RSS).

    Reading a memory map keeps every page touched resident in the process, so a pass
    over a large file grows the RSS by the file's size although nothing is held. After
    ``release`` the pages stay in the kernel's page cache (a re-read is cheap) but no
    longer count against the process. A no-op for arrays that are not read-only maps.
    """
    mm = getattr(array, "_mmap", None)
    if isinstance(array, np.memmap) and array.mode == "r" and mm is not None:
        mm.madvise(mmap.MADV_DONTNEED)


def copy_rows(array: np.ndarray, start: int, stop: int) -> np.ndarray:
    """A copy of ``array[start:stop]``, its pages released when ``array`` is a map."""
    block = np.array(array[start:stop])
    release(array)
    return block


def save_npy(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Write ``array`` as ``.npy`` (chunk-free; memory maps are streamed by numpy)."""
    np.save(path, np.asarray(array), allow_pickle=False)


def save_npy_blocks(
    path: str | os.PathLike[str],
    shape: tuple[int, ...],
    dtype: np.dtype[Any] | type,
    blocks: Iterable[np.ndarray],
) -> str:
    """Write a ``.npy`` file from consecutive row blocks, hashing while writing.

    Only one block is in memory at a time, so a large array (e.g. features gathered
    from a memory map) is streamed to disk.

    Args:
        path: File to write.
        shape: Shape of the whole array.
        dtype: Its dtype; every block is cast to it.
        blocks: C-ordered row blocks whose concatenation along axis 0 has ``shape``.

    Returns:
        The hex SHA-256 of the file written (as :func:`sha256_file` would compute it).
    """
    dt = np.dtype(dtype)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {
        "descr": np.lib.format.dtype_to_descr(dt), "fortran_order": False,
        "shape": tuple(int(s) for s in shape)})
    h = hashlib.sha256(header.getvalue())
    written = 0
    with open(path, "wb") as f:
        f.write(header.getvalue())
        for block in blocks:
            data = np.ascontiguousarray(block, dtype=dt).reshape(-1).view(np.uint8).data
            h.update(data)
            f.write(data)
            written += data.nbytes
    expected = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if written != expected:
        raise ValueError(f"{path}: blocks hold {written} bytes, shape {shape} needs {expected}.")
    return h.hexdigest()


def save_npy_sha256(path: str | os.PathLike[str], array: np.ndarray) -> str:
    """Write ``array`` as ``.npy`` like :func:`save_npy`; return the file's hex SHA-256."""
    a = np.asarray(array)
    return save_npy_blocks(path, a.shape, a.dtype, [a])


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


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


def read_json(path: str | os.PathLike[str], error: type[GnnparError] = GnnparError) -> Any:
    """Parse a JSON file, naming the file in the error when it is missing or invalid.

    The file must be UTF-8 (as JSON is): other bytes are an error naming their offset.
    """
    p = Path(path)
    if not p.is_file():
        raise error("file is missing.", path=p, fix="check the path.")
    try:
        return json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise error(f"is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                    f"{exc.start}); it is damaged or not a JSON file.", path=p,
                    fix="re-create the file.") from None
    except json.JSONDecodeError as exc:
        raise error(f"invalid JSON ({exc}).", path=p, fix="re-create the file.") from None
    except OSError as exc:
        raise error(f"cannot be read ({exc.strerror or exc}).", path=p,
                    fix="check the file's permissions.") from None


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented JSON."""
    Path(path).write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def storage_error(exc: OSError, directory: str | os.PathLike[str], needed: int,
                  what: str) -> StorageError:
    """The error of an output that could not be written, naming where and the bytes needed.

    Args:
        exc: What the write raised.
        directory: The directory written into.
        needed: Bytes the output needs.
        what: The output, e.g. ``"the checkpoint"``.
    """
    try:
        free = f"{shutil.disk_usage(directory).free:,} bytes are free there"
    except OSError:
        free = "the free space there is unknown"
    full = exc.errno in _FULL_DISK
    return StorageError(
        f"{what} cannot be written ({exc.strerror or exc}): it needs {needed:,} bytes, "
        f"{free}; nothing was replaced and no temporary file is left.", path=directory,
        fix=("free space on that file system, or write to another one (--out)." if full
             else "make the directory writable, or write to another one (--out)."))


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as :func:`write_json` does, through a temporary sibling and a rename.

    A failed write (a full disk) leaves the previous file as it was and no temporary file,
    and raises :class:`~gnnpar.errors.StorageError` naming the directory and the bytes.
    """
    out = Path(path)
    text = (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(text)
        os.replace(tmp, out)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise storage_error(exc, out.parent, len(text), out.name) from None


DIGEST_KEY = "digest"
"""The field of a self-digested JSON document that holds its SHA-256."""


def json_digest(doc: dict[str, Any]) -> str:
    """Hex SHA-256 of ``doc`` without its :data:`DIGEST_KEY` (sorted keys, compact)."""
    body = {k: v for k, v in doc.items() if k != DIGEST_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def write_digested_json(path: str | os.PathLike[str], doc: dict[str, Any]) -> None:
    """Write ``doc`` with its own digest, so that damage to the file is detected on read."""
    write_json(path, {**doc, DIGEST_KEY: json_digest(doc)})


def check_json_digest(doc: dict[str, Any], path: str | os.PathLike[str],
                      error: type[GnnparError] = GnnparError) -> None:
    """Raise ``error`` unless ``doc`` (read from ``path``) holds its own, correct digest."""
    if DIGEST_KEY not in doc:
        raise error("the file has no digest field, so damage to it cannot be detected.",
                    path=path, field=DIGEST_KEY, fix="re-create it with this gnnpar version.")
    if doc[DIGEST_KEY] != json_digest(doc):
        raise error("the file was changed after it was written (its digest differs).",
                    path=path, field=DIGEST_KEY, fix="re-create it; never edit it by hand.")
