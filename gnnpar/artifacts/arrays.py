"""``.npy`` arrays: read checked before anything is allocated, written streamed and hashed.

:func:`load_npy` reads an array's header first and compares the bytes it claims with the
file's size, its dtype and shape with what the caller expects, and refuses Python
objects, before numpy allocates or maps anything: a header edited to ``10**13`` rows
is an error naming the file, not a ``MemoryError``.  Arrays are memory-mapped by default
and never unpickled.  :class:`NpyWriter` streams row blocks into a file and hashes them on
the way (one block in memory at a time).
"""

from __future__ import annotations

import errno
import hashlib
import io
import mmap
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gnnpar.errors import GnnparError

Shape = Sequence[int | None]
"""An expected shape: ``None`` where any length is accepted."""


def npy_header(path: str | os.PathLike[str], error: type[GnnparError] = GnnparError
               ) -> tuple[tuple[int, ...], np.dtype[Any], int, bool]:
    """``(shape, dtype, data offset, Fortran order)`` of a ``.npy`` file, checked.

    Raises:
        error: Not a ``.npy`` file, an object dtype, or a header whose shape needs more
            (or fewer) bytes than the file holds.
    """
    p = Path(path)
    fix = "re-create the directory that holds it."
    if not p.is_file():
        raise error("file is missing.", path=p, fix=fix)
    try:
        with open(p, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unknown .npy version {version}")
            offset = f.tell()
    except (ValueError, SyntaxError, TypeError, EOFError) as exc:
        raise error(f"not a readable .npy array ({str(exc)[:160]}).", path=p, fix=fix) from None
    except OSError as exc:
        raise error(f"cannot be read ({exc.strerror or exc}).", path=p,
                    fix="check the file's permissions.") from None
    if dtype.hasobject or dtype.itemsize == 0:
        what = "Python objects" if dtype.hasobject else "an empty-typed array"
        raise error(f"holds {what} (dtype {dtype.str}), which gnnpar never reads.", path=p,
                    field="dtype", fix=fix)
    count = 1
    for d in shape:
        count *= int(d)
    size = p.stat().st_size
    if offset + count * dtype.itemsize != size:
        raise error(f"its header says shape {list(shape)} of {dtype.name} "
                    f"({count * dtype.itemsize:,} bytes) but the file holds "
                    f"{size - offset:,} bytes of data: it is truncated or was edited.",
                    path=p, field="shape", fix=fix)
    return tuple(int(d) for d in shape), dtype, offset, bool(fortran)


def load_npy(path: str | os.PathLike[str], mmap: bool = True,
             error: type[GnnparError] = GnnparError, *, dtype: Any = None,
             shape: Shape | None = None, field: str | None = None) -> np.ndarray:
    """Read one ``.npy`` file, checked before allocation (see the module docstring).

    Args:
        path: File to read.
        mmap: Memory-map read-only instead of reading into memory.
        error: Exception type to raise for a missing or damaged file.
        dtype: The dtype it must have (``None``: any but objects).
        shape: The shape it must have (``None`` entries: any length; ``None``: any shape).
        field: The field named in errors (default: the file's stem).
    """
    p = Path(path)
    got, kind, offset, fortran = npy_header(p, error)
    name = field or p.stem
    fix = "re-create the directory that holds it."
    if dtype is not None and kind != np.dtype(dtype):
        raise error(f"has dtype {kind.name}, expected {np.dtype(dtype).name}.", path=p,
                    field=name, fix=fix)
    if shape is not None and (len(got) != len(shape) or any(
            w is not None and g != w for g, w in zip(got, shape, strict=True))):
        want = ["*" if w is None else w for w in shape]
        raise error(f"has shape {list(got)}, expected {want}.", path=p, field=name, fix=fix)
    try:
        order: Literal["F", "C"] = "F" if fortran else "C"
        array: np.ndarray
        if mmap:
            array = np.memmap(p, dtype=kind, mode="r", offset=offset, shape=got, order=order)
        else:
            with open(p, "rb") as f:
                f.seek(offset)
                array = np.fromfile(f, dtype=kind, count=int(np.prod(got, dtype=np.int64))
                                    ).reshape(got, order=order)
        return array
    except (OSError, ValueError) as exc:
        raise error(f"cannot be read ({str(exc)[:160]}).", path=p, field=name,
                    fix=fix) from None


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


class NpyWriter:
    """A ``.npy`` file written from consecutive row blocks, hashed on the way.

    Args:
        path: File to write (inside a directory that is itself written aside).
        shape: Shape of the whole array.
        dtype: Its dtype; every block is cast to it.
    """

    def __init__(self, path: str | os.PathLike[str], shape: Sequence[int],
                 dtype: Any) -> None:
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(s) for s in shape)
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {
            "descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
            "shape": self.shape})
        self._hash = hashlib.sha256(header.getvalue())
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._file.write(header.getvalue())
        self.bytes = len(header.getvalue())
        self._data = 0

    def write(self, block: Any) -> None:
        """Append the next rows (cast to the file's dtype, C order)."""
        data = np.ascontiguousarray(block, dtype=self.dtype).reshape(-1).view(np.uint8).data
        self._hash.update(data)
        self._file.write(data)
        self._data += data.nbytes

    def close(self) -> str:
        """Finish the file; its hex SHA-256.

        Raises:
            ValueError: The blocks did not fill the shape.
        """
        self._file.close()
        expected = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        if self._data != expected:
            raise ValueError(f"{self.path}: blocks hold {self._data} bytes, shape "
                             f"{self.shape} needs {expected}.")
        self.bytes += self._data
        return self._hash.hexdigest()

    def abort(self) -> None:
        """Close without checking (the directory is being discarded)."""
        self._file.close()


def save_npy_blocks(path: str | os.PathLike[str], shape: tuple[int, ...], dtype: Any,
                    blocks: Iterable[np.ndarray]) -> str:
    """Write a ``.npy`` file from consecutive row blocks; the file's hex SHA-256.

    Only one block is in memory at a time, so a large array (e.g. features gathered
    from a memory map) is streamed to disk.
    """
    writer = NpyWriter(path, shape, dtype)
    try:
        for block in blocks:
            writer.write(block)
    except BaseException:
        writer.abort()
        raise
    return writer.close()


def save_npy_sha256(path: str | os.PathLike[str], array: np.ndarray) -> str:
    """Write ``array`` as ``.npy``; return the file's hex SHA-256."""
    a = np.asarray(array)
    return save_npy_blocks(path, a.shape, a.dtype, [a])


def save_npy(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Write ``array`` as ``.npy`` (inside a directory that is itself written aside)."""
    np.save(path, np.asarray(array), allow_pickle=False)


def check_written(path: str | os.PathLike[str], expected: int) -> None:
    """Raise ``OSError(ENOSPC)`` unless ``path`` holds ``expected`` bytes.

    numpy's ``tofile`` can return without an error when the file system took fewer bytes
    than it was given (a full disk); a file written with it is checked before it is used.
    """
    size = os.path.getsize(path)
    if size != expected:
        raise OSError(errno.ENOSPC, f"the file system took {size:,} of {expected:,} bytes",
                      str(path))
