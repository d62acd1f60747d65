"""One writer at a time: a lock file beside an output, naming who holds it.

``lock(out)`` holds an exclusive, non-blocking ``flock`` on ``.NAME.lock`` beside ``out``
for as long as a write (or a whole run) lasts, and writes the holder's process id, host,
command and start time into it.  A second writer is refused within half a second with
those facts; a lock whose holder died is free again (the kernel drops ``flock`` locks
with their process), and its file is reused or removed by the next holder.  A cache that several
processes may ask for at once (a partition of a dataset spec, a converted OGB folder) is
filled by :func:`fill_cache`: the first process makes it, the others wait for its lock
and read what it made.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
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


WAIT_REPORT_S = 60.0
"""How often a process waiting for another's lock says so again."""


def wait_unlocked(out: str | os.PathLike[str], report: Callable[[str], None],
                  poll_s: float = 0.2) -> None:
    """Return once no process holds the lock of ``out``.

    ``report(holder)`` is called when the wait starts and every :data:`WAIT_REPORT_S`
    seconds of it.  A holder that dies frees the lock with it: the wait never outlives it.
    """
    said = -WAIT_REPORT_S
    while (who := holder(out)) is not None:
        if time.monotonic() - said >= WAIT_REPORT_S:
            report(who)
            said = time.monotonic()
        time.sleep(poll_s)


def fill_cache(out: str | os.PathLike[str], complete: Callable[[], bool],
               make: Callable[[], None], report: Callable[[str], None]) -> bool:
    """Make the cache ``out`` unless it is complete, or wait for the process making it.

    ``make`` runs under ``out``'s lock, from reading its inputs to writing ``out`` (an
    atomic directory; the writer's own :func:`lock` of ``out`` is the same, already held);
    while another process holds that lock this one waits (``report`` names the holder),
    then uses what it made.  Where no lock file can be made beside ``out`` yet (its
    directory does not exist), ``make`` starts without one and its writer's lock decides.

    Returns:
        ``True`` when this process made it, ``False`` when it was complete already.

    Raises:
        GnnparError: ``make`` failed, and not because another process made ``out`` first.
    """
    while True:
        wait_unlocked(out, report)
        if complete():
            return False
        try:
            with contextlib.ExitStack() as held:
                # Held from the first read of the inputs: no one else loads them.  Where
                # no lock file can be made yet, the writer's own lock guards the write.
                with contextlib.suppress(StorageError):
                    held.enter_context(lock(out, error=_Taken))
                if complete():
                    return False
                make()
                return True
        except _Taken:
            continue  # another process took it first: wait for it
        except GnnparError:
            if complete():
                return False
            if holder(out) is None:  # not a race with another writer: the error stands
                raise


class _Taken(GnnparError):
    """Another process took the cache's lock first."""


def _describe(path: Path, settle_s: float = 1.0) -> str:
    """The holder recorded in a lock file, as a phrase.

    A holder writes its facts right after it takes the lock: a file still empty is read
    again for up to ``settle_s`` seconds.
    """
    end = time.monotonic() + settle_s
    while True:
        try:
            info = json.loads(path.read_bytes().decode("utf-8"))
            since = time.strftime("%Y-%m-%d %H:%M:%S",
                                  time.localtime(float(info["started"])))
            return (f"process {int(info['pid'])} on {info['host']} since {since} "
                    f"({str(info['command'])[:80]})")
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() >= end:
                return "another process (its lock file names no holder yet)"
            time.sleep(0.02)


PROBE_S = 0.5
"""How long a writer retries a lock that is taken: :func:`holder` (a waiting process asks
every 0.2 s) holds it shared for a moment; a writer holds it for its whole write."""


_HELD: set[str] = set()
"""Lock files this process holds: taking one again inside its block is a no-op."""


def _exclusive(fd: int) -> bool:
    """Take ``fd``'s exclusive lock, retried for :data:`PROBE_S` (another's probe)."""
    end = time.monotonic() + PROBE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= end:
                return False
            time.sleep(0.01)


@contextlib.contextmanager
def lock(out: str | os.PathLike[str], error: type[GnnparError] = GnnparError,
         what: str = "this output") -> Iterator[None]:
    """Hold the lock of ``out`` for the block; raise ``error`` naming the holder if taken.

    Re-entrant within a process: a block inside another holding the same lock holds it
    already.

    Args:
        out: The output (a directory or a file) to write.
        error: The exception type raised when another process holds the lock.
        what: The output in the message (``"this run directory"``).

    Raises:
        error: Another process holds it (the message names its pid, host, start time).
        StorageError: The lock file cannot be created (the directory is not writable).
    """
    path = lock_path(out)
    key = os.path.abspath(path)
    if key in _HELD:  # this process holds it already (fill_cache around its writer)
        yield
        return
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot be written: its lock file {path.name} cannot be "
                               f"created ({exc.strerror or exc}).", path=out, field="out",
                               fix="write under a writable directory.") from None
        if not _exclusive(fd):
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
        _HELD.add(key)
        yield
    finally:
        _HELD.discard(key)
        with contextlib.suppress(OSError):
            os.unlink(path)  # while still held: a later writer makes a new one
        os.close(fd)
