"""Safe file helpers shared by every stage: atomic directories, ``.npy`` and JSON I/O.

Outputs are written into a temporary sibling directory and renamed into place only when
complete, so an interrupted or failed write never leaves a half-written directory and
never destroys the previous one.  Arrays are read with ``allow_pickle=False`` and, by
default, memory-mapped.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.errors import GnnparError


@contextlib.contextmanager
def atomic_directory(
    out_dir: str | os.PathLike[str],
    overwrite: bool = False,
    error: type[GnnparError] = GnnparError,
    overwrite_hint: str = "pass overwrite=True (CLI: --overwrite) or choose another path.",
) -> Iterator[Path]:
    """Yield a fresh temporary directory that becomes ``out_dir`` when the block succeeds.

    Args:
        out_dir: Final location.
        overwrite: Replace an existing ``out_dir``; the old one is removed only after the
            new one is complete.
        error: Exception type raised when ``out_dir`` exists and ``overwrite`` is False.
        overwrite_hint: The fix named in that error.

    Yields:
        The temporary directory to write into (a sibling of ``out_dir``).
    """
    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise error("the output directory already exists.", path=out, fix=overwrite_hint)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_directory(tmp, out)


def replace_directory(tmp: str | os.PathLike[str], out: str | os.PathLike[str]) -> None:
    """Rename the complete directory ``tmp`` to ``out``, replacing any existing ``out``.

    The old ``out`` is moved aside first and removed only once ``tmp`` is in place.  On
    failure ``tmp`` is removed and the old ``out``, if any, is put back.

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


def read_json(path: str | os.PathLike[str], error: type[GnnparError] = GnnparError) -> Any:
    """Parse a JSON file, naming the file in the error when it is missing or invalid."""
    p = Path(path)
    if not p.is_file():
        raise error("file is missing.", path=p, fix="check the path.")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise error(f"invalid JSON ({exc}).", path=p, fix="re-create the file.") from exc


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented JSON."""
    Path(path).write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
