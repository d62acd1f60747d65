"""Processes of a run seen from outside: its ranks, their sockets, their progress."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


def exe() -> list[str]:
    """The ``gnnpar-train`` command (the console script, else ``python -m``)."""
    path = shutil.which("gnnpar-train")
    return [path] if path else [sys.executable, "-m", "gnnpar.train"]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def rank_pid(launcher: int, rank: int) -> int | None:
    """The process of rank ``rank`` below ``launcher`` (by its ``RANK`` variable).

    Not multiprocessing's resource tracker, which the launcher starts with the first
    rank's environment.
    """
    for pid in descendants(launcher):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and b"resource_tracker" not in command:
            return pid
    return None


def listeners(pids: list[int]) -> list[str]:
    """Local addresses of the TCP sockets in LISTEN state that ``pids`` hold."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:
                found.append(cols[1].split(":")[0])
    return found


def wait_for_epochs(record: Path, n: int, proc: subprocess.Popen[str], limit: float) -> None:
    """Wait until the run record lists ``n`` epochs (at most ``limit`` seconds)."""
    end = time.monotonic() + limit
    while time.monotonic() < end and proc.poll() is None:
        try:
            if len(json.loads(record.read_text())["epochs"]) >= n:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"the run did not reach epoch {n} (exit {proc.poll()})")


def _default_interrupt() -> None:
    # As a terminal would start it: a shell runs a background job (a CI script's `cmd &`)
    # with SIGINT ignored, and the child would inherit that and ignore Ctrl-C.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """Start ``gnnpar-train ARGS`` in a session of its own (signals reach all of it).

    SIGINT takes its default action, whatever this process inherited.
    """
    return subprocess.Popen([*exe(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, start_new_session=True,
                            preexec_fn=_default_interrupt)
