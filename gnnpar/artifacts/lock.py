"""One writer at a time: a lock file beside an output, naming who holds it.

``lock(out)`` holds an exclusive, non-blocking ``flock`` on ``.NAME.lock`` beside ``out``
for as long as a write (or a whole run) lasts, and writes the holder's process id, host,
command and start time into it.  A second writer is refused at once with those facts; a
lock whose holder died is free again (the kernel drops ``flock`` locks with their
process), and its file is reused or removed by the next holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from gnnpar.errors import GnnparError, StorageError


def lock_path(out: str | os.PathLike[str]) -> Path:
    """The lock file of ``out``: ``.NAME.lock`` in its parent directory."""
    p = Path(out)
    return p.parent / f".{p.name}.lock"


def holder(out: str | os.PathLike[str]) -> str | None:
    """Who holds the lock of ``out`` (``"pid 123 on host h since 12:00:01 (cmd)"``), if anyone."""
    path = lock_path(out)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _describe(path)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _describe(path: Path) -> str:
    """The holder recorded in a lock file, as a phrase."""
    try:
        info = json.loads(path.read_bytes().decode("utf-8"))
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["started"])))
        return (f"process {int(info['pid'])} on {info['host']} since {since} "
                f"({str(info['command'])[:80]})")
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (its lock file names no holder yet)"


@contextlib.contextmanager
def lock(out: str | os.PathLike[str], error: type[GnnparError] = GnnparError,
         what: str = "this output") -> Iterator[None]:
    """Hold the lock of ``out`` for the block; raise ``error`` naming the holder if taken.

    Args:
        out: The output (a directory or a file) to write.
        error: The exception type raised when another process holds the lock.
        what: The output in the message (``"this run directory"``).

    Raises:
        error: Another process holds it (the message names its pid, host, start time).
        StorageError: The lock file cannot be created (the directory is not writable).
    """
    path = lock_path(out)
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot be written: its lock file {path.name} cannot be "
                               f"created ({exc.strerror or exc}).", path=out, field="out",
                               fix="write under a writable directory.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise error(f"another gnnpar process is writing {what} right now: "
                        f"{_describe(path)}.", path=out, field="out",
                        fix="wait for it to finish (or stop it), or choose another "
                        "output.") from None
        # The file may have been removed by its last holder between open and flock.
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                "command": " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]])}
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps(info).encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)  # while still held: a later writer makes a new one
        os.close(fd)
