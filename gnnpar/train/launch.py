"""Start the workers of one machine: a loopback-only store, one process per rank, one error.

``gnnpar-train --nproc N`` (and :func:`gnnpar.testing.run_multiproc`) start their ranks
here rather than through torch's elastic agent, whose c10d rendezvous listens on every
interface and keeps pickled state in an unauthenticated store.  The launcher:

* hosts the ``TCPStore`` that the ranks rendezvous in (``MASTER_ADDR:MASTER_PORT``) on a
  socket bound to ``127.0.0.1`` only, and points gloo and NCCL at the loopback interface
  (``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME=lo`` unless set), so nothing listens
  beyond this machine; nothing is unpickled from the store;
* starts each rank as a spawned process with a torchrun-like environment (``RANK``,
  ``LOCAL_RANK``, ``WORLD_SIZE``, ...), which dies with the launcher (``PR_SET_PDEATHSIG``)
  and leads a session of its own, as torchrun's workers do: where the kernel shares the
  CPU between sessions first (``kernel.sched_autogroup_enabled``, the default of many
  distributions), N ranks get the share of N torchrun workers, not of one;
* collects each rank's outcome from a JSON error file (never a pickle): when a rank fails,
  the others get ``grace_s`` to report theirs (a peer's failure reaches them as a failed
  collective), then the rest are killed, so no rank is left hanging; a rank whose
  heartbeat (:mod:`gnnpar.faults`) has stood still for ``stale_s`` is not waited for;
* on Ctrl-C or SIGTERM, passes SIGINT on to every rank (in sessions of their own, they
  are out of the terminal's reach), stops them and raises :class:`Interrupted`;
* can start the ranks again after a failure (:class:`Launcher`, ``gnnpar-train
  --max-restarts``: :mod:`gnnpar.train.elastic`), with the same store, as torchrun's agent
  does: the restarted ranks count their starts there.

Multi-machine runs use ``torchrun`` instead; its c10d store is unauthenticated, so it
belongs on a private network.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import json
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from gnnpar.artifacts.files import write_json_atomic
from gnnpar.errors import DistributedError, GnnparError

if TYPE_CHECKING:
    from gnnpar.faults import HeartbeatWatch

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class RankOutcome:
    """How one rank ended.

    Attributes:
        rank: The rank.
        exitcode: Its process's exit code (negative: killed by that signal).
        type: The exception's class name (``None`` when it exited without one).
        message: The exception's text, or what happened to the process.
        own: Whether the failure is the rank's own, not the echo of a peer's.
        gnnpar: Whether it was a :class:`~gnnpar.errors.GnnparError` (a user error, shown
            without traceback).
        traceback: The traceback, for errors that are not gnnpar's.
    """

    rank: int
    exitcode: int
    type: str | None = None
    message: str = ""
    own: bool = True
    gnnpar: bool = False
    traceback: str = ""


class WorkersFailed(DistributedError):
    """Some ranks failed; :attr:`outcomes` says how each one ended.

    Attributes:
        outcomes: How each rank ended.
        failed_at: When the launcher first saw a rank fail (``time.time()``).
    """

    def __init__(self, message: str, outcomes: list[RankOutcome],
                 failed_at: float | None = None) -> None:
        super().__init__(message)
        self.outcomes = outcomes
        self.failed_at = time.time() if failed_at is None else failed_at

    @property
    def restartable(self) -> bool:
        """Whether starting the ranks again may get past it.

        Not when a rank's own error is a user error (bad input or settings, which would
        only repeat).
        """
        return not any(o.gnnpar and o.type != "DistributedError"
                       for o in self.outcomes if o.exitcode != 0 and o.own)

    @property
    def first_cause(self) -> int | None:
        """The rank whose own failure came first (the lowest rank among the causes)."""
        causes = [o.rank for o in self.outcomes if o.exitcode != 0 and o.own]
        return min(causes) if causes else None


class Interrupted(Exception):
    """The run was interrupted (Ctrl-C or SIGTERM) and every rank stopped.

    Args:
        out: The run directory, when it was settled (for the resume hint).
    """

    def __init__(self, out: str | None = None) -> None:
        super().__init__(f"interrupted (run directory {out})")
        self.out = out


def loopback_store(world_size: int) -> Any:
    """A ``TCPStore`` server for ``world_size`` ranks listening on ``127.0.0.1`` only."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    store = TCPStore("127.0.0.1", sock.getsockname()[1], world_size, is_master=True,
                     master_listen_fd=sock.fileno(), wait_for_workers=False)
    sock.detach()  # the store owns the listening descriptor now
    return store


def threads_per_rank(ranks_here: int) -> int:
    """Torch threads for each of ``ranks_here`` ranks that share this machine's cores.

    The cores this process may run on (its affinity mask), split evenly, at least one
    each: more threads than cores makes every rank's OpenMP threads wait on each other's.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, ranks_here))


def worker_env(rank: int, world_size: int, port: int, threads: int | None,
               restarts: int = 0, max_restarts: int = 0) -> dict[str, str]:
    """The torchrun-like environment of rank ``rank`` of a one-machine run.

    ``restarts``: how many times the workers were restarted so far, of ``max_restarts``.
    """
    env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
           "LOCAL_WORLD_SIZE": str(world_size), "GROUP_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "TORCHELASTIC_USE_AGENT_STORE": "True",
           "TORCHELASTIC_RESTART_COUNT": str(restarts),
           "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
           "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
           "NCCL_SOCKET_IFNAME": os.environ.get("NCCL_SOCKET_IFNAME", "lo")}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def _detach(launcher: int) -> None:
    """Lead a session of this rank's own, and die with ``launcher`` (also if it is gone)."""
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != launcher:  # it died before the signal was asked for
        os._exit(1)


def describe_error(exc: BaseException) -> dict[str, Any]:
    """What a rank reports of the exception it ends with (JSON-able)."""
    return {"type": type(exc).__name__, "message": str(exc),
            "own": getattr(exc, "cause_rank", None) is None,
            "gnnpar": isinstance(exc, GnnparError),
            "traceback": "" if isinstance(exc, (GnnparError, KeyboardInterrupt))
            else "".join(traceback.format_exception(exc))}


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` updated with ``env`` inside the block (a spawned child inherits it)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _child(target: str, args: tuple[Any, ...], error_file: str, launcher: int) -> None:
    _detach(launcher)
    module, name = target.rsplit(":", 1)
    try:
        import torch
        from tqdm import tqdm

        # tqdm's default lock is a multiprocessing semaphore, which the launcher's resource
        # tracker reports as leaked (after the launcher's last line) when a rank exits at
        # once on Ctrl-C; ranks share no progress bar, so a thread lock is enough.
        tqdm.set_lock(threading.RLock())
        if "OMP_NUM_THREADS" in os.environ:
            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        getattr(importlib.import_module(module), name)(*args)
    except BaseException as exc:  # noqa: BLE001 - reported to the launcher, then exit
        with contextlib.suppress(Exception):  # the exit status still tells the launcher
            write_json_atomic(error_file, describe_error(exc))
        os._exit(130 if isinstance(exc, KeyboardInterrupt) else 1)
    exit_now(0)


def exit_now(code: int) -> NoReturn:
    """End this process: its exit handlers and streams, not the interpreter's teardown.

    Tearing down torch's and PyG's modules takes a process 1-3 s on a loaded machine (its
    memory and threads go with the process anyway), which the launcher, or the user,
    would wait for after the run's last line.
    """
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _outcome(rank: int, exitcode: int, error_file: Path, stopped: bool,
             silent_s: float | None) -> RankOutcome:
    if stopped and silent_s is not None:  # it had stopped beating: it is the cause
        return RankOutcome(rank, exitcode, None, f"stopped sending heartbeats for "
                           f"{silent_s:.0f} s (hung, stopped by a signal such as SIGSTOP, or "
                           "starved of CPU), so the launcher killed it. Fix: find what stopped "
                           "it, then continue the run with --resume.")
    if stopped:  # still running after a peer failed: its peers' errors say why
        return RankOutcome(rank, exitcode, None, "still running after a peer failed; stopped",
                           own=False)
    if error_file.is_file():
        with contextlib.suppress(ValueError, OSError):
            info = json.loads(error_file.read_text())
            return RankOutcome(rank, exitcode, info["type"], info["message"], info["own"],
                               info["gnnpar"], info["traceback"])
    if exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else "?"
        return RankOutcome(rank, exitcode, None, f"killed by signal {-exitcode} ({name}). "
                           "Fix: find what killed it (the kernel's out-of-memory killer shows "
                           "in dmesg; a scheduler's limits in its log), then continue the run "
                           "with --resume.")
    return RankOutcome(rank, exitcode, None, f"exited with code {exitcode} without an error")


def summarise(outcomes: Sequence[RankOutcome], world_size: int) -> str:
    """The failure in a few lines: each root cause once, naming its ranks.

    A rank's own error, or a process that died, is a root cause; a rank whose collective
    failed because of a peer only repeats it, and is shown only when nothing else is
    known.  Errors that are not gnnpar's keep their traceback.
    """
    causes = [o for o in outcomes if o.exitcode != 0 and o.own]
    shown = causes or [o for o in outcomes if o.exitcode != 0][:1]
    groups: dict[str, list[int]] = {}
    tracebacks: dict[str, str] = {}
    for o in shown:
        text = o.message if o.gnnpar or o.type is None else f"{o.type}: {o.message}"
        groups.setdefault(text, []).append(o.rank)
        tracebacks.setdefault(text, o.traceback)
    lines = []
    for text, ranks in groups.items():
        who = (f"rank {ranks[0]} of {world_size}" if len(ranks) == 1
               else f"ranks {', '.join(map(str, ranks))} of {world_size}")
        echo = not causes  # a peer's report ("rank r of W ...") names the cause itself
        lines.append(text if echo or world_size == 1 else f"{who}: {text}")
        if tracebacks[text]:
            lines.append(tracebacks[text].rstrip())
    return "\n".join(lines)


def launch_workers(target: str, args: tuple[Any, ...], nproc: int,
                   threads: int | None = None, grace_s: float = 10.0,
                   stale_s: float | None = None) -> None:
    """Run ``target(*args)`` on ``nproc`` local ranks and wait for all of them.

    Args:
        target: ``"module:function"`` to run on every rank (it calls
            :func:`gnnpar.distributed.init` itself, as a torchrun worker would).
        args: Its arguments (picklable; they go to our own child processes only).
        nproc: Number of ranks.
        threads: Torch threads per rank.
        grace_s: Once a rank has failed, how long the others get to report theirs.
        stale_s: Once a rank has failed, a living rank whose heartbeat count has stood
            still this long is stopped without waiting out ``grace_s`` (a stopped or hung
            process: it will report nothing); ``None``: heartbeats are not read.

    Raises:
        WorkersFailed: A rank failed; the message is :func:`summarise`'s.
        Interrupted: Ctrl-C or SIGTERM; every rank was stopped.
    """
    Launcher(nproc, threads, grace_s, stale_s).run(target, args)


class Launcher:
    """The ranks of one machine, started as often as the run needs (a restart).

    One loopback store serves every start, as torchrun's agent's does: the ranks' failure
    notes outlive them there, and each start's ranks find each other under a prefix of
    their own (:func:`gnnpar.distributed.init`).  :meth:`run` takes the arguments of
    :func:`launch_workers`.

    Attributes:
        restarts: How many times the ranks were started again after a failure.
        store: The store (``MASTER_ADDR:MASTER_PORT`` of the ranks).
    """

    def __init__(self, nproc: int, threads: int | None = None, grace_s: float = 10.0,
                 stale_s: float | None = None, max_restarts: int = 0) -> None:
        self.nproc, self.threads, self.grace_s, self.stale_s = nproc, threads, grace_s, stale_s
        self.max_restarts = max_restarts
        self.restarts = -1
        self.store = loopback_store(nproc)

    def run(self, target: str, args: tuple[Any, ...]) -> None:
        """Start the ranks (again) and wait for all of them; raises as :func:`launch_workers`."""
        import torch.multiprocessing as mp

        from gnnpar.faults import HeartbeatWatch

        nproc, store = self.nproc, self.store
        self.restarts += 1
        ctx = mp.get_context("spawn")
        watch = (None if self.stale_s is None
                 else HeartbeatWatch(store, list(range(nproc)), self.stale_s))
        silent: dict[int, float] = {}
        failed_at: float | None = None
        with tempfile.TemporaryDirectory(prefix="gnnpar-launch-") as tmp:
            files = [Path(tmp) / f"rank-{r}.json" for r in range(nproc)]
            procs = [ctx.Process(target=_child, name=f"gnnpar-rank-{r}",
                                 args=(target, args, str(files[r]), os.getpid()))
                     for r in range(nproc)]
            previous = signal.signal(signal.SIGTERM, _raise_interrupt)
            try:
                for rank, p in enumerate(procs):
                    with _environ(worker_env(rank, nproc, store.port, self.threads,
                                             self.restarts, self.max_restarts)):
                        p.start()  # the rank's environment from its start, as under torchrun
                silent, failed_at = _wait(procs, self.grace_s, watch)
            except (KeyboardInterrupt, Interrupted):
                _interrupt(procs)
                _stop(procs, 5.0)
                raise Interrupted() from None
            finally:
                signal.signal(signal.SIGTERM, previous)
                stopped = _stop(procs, 0.0)
            outcomes = [_outcome(r, p.exitcode or 0, files[r], r in stopped, silent.get(r))
                        for r, p in enumerate(procs)]
        if any(o.exitcode != 0 for o in outcomes):
            if all(o.type in ("KeyboardInterrupt", "Interrupted") for o in outcomes
                   if o.exitcode != 0):
                raise Interrupted()
            raise WorkersFailed(summarise(outcomes, nproc), outcomes, failed_at)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise Interrupted()


def _wait(procs: list[Any], grace_s: float, watch: HeartbeatWatch | None
          ) -> tuple[dict[int, float], float | None]:
    """Until every rank has exited, or ``grace_s`` after the first one failed.

    With ``watch``, also until every living rank's heartbeat stands still, once one failed.

    Returns:
        The living ranks whose heartbeat stood still when a failure ended the wait, with
        the seconds since it last moved; and when the first failure was seen.
    """
    deadline = failed_at = None
    while any(p.is_alive() for p in procs):
        if watch is not None:
            watch.update()
        if deadline is None and any(p.exitcode not in (None, 0) for p in procs):
            deadline, failed_at = time.monotonic() + grace_s, time.time()
        alive = {r for r, p in enumerate(procs) if p.is_alive()}
        stale = set(watch.stale()) if watch is not None else set()
        if deadline is not None and (time.monotonic() >= deadline or stale >= alive):
            return ({r: watch.silent_for(r) for r in stale & alive} if watch else {},
                    failed_at)
        time.sleep(0.05)
    if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
        failed_at = time.time()
    return {}, failed_at


def _interrupt(procs: list[Any]) -> None:
    """Pass Ctrl-C on to the living ranks (each in a session of its own)."""
    for p in procs:
        if p.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGINT)


def _stop(procs: list[Any], wait_s: float) -> set[int]:
    """Give the living ranks ``wait_s`` to exit, then SIGKILL them (stopped ones too).

    Returns:
        The ranks killed here.
    """
    end = time.monotonic() + wait_s
    while wait_s and any(p.is_alive() for p in procs) and time.monotonic() < end:
        time.sleep(0.05)
    killed = set()
    for rank, p in enumerate(procs):
        if p.is_alive():
            p.kill()
            killed.add(rank)
        if p.pid is not None:  # a rank whose start failed was never a process
            p.join()
    return killed

