"""One clear error on every rank when any rank fails, and no rank left hanging.

Every step of a distributed run is collective, so a rank that fails alone leaves its
peers waiting.  Two mechanisms turn that into an error on every rank:

* :func:`agree` / :func:`agreed` — for steps that can fail on one rank while all are
  alive (a damaged part file, a partition that cannot be written, ...).  Every rank runs
  the step, catches what it raised, and joins one ``all_gather`` of the outcomes: the
  failed rank re-raises its own exception, every other rank raises the same error class
  with ``"rank r of W failed: ..."`` and the original field and fix.
* :class:`FailureBoard` — for failures in the middle of training.  Peers of a rank that
  raised or died are inside a collective; it fails ("Connection closed by peer") or
  times out after the collective timeout (``--timeout-s``).  The board is a
  few keys in the launcher's key-value store (the torchrun agent's store at
  ``MASTER_ADDR:MASTER_PORT``, which outlives the workers): a failing rank posts its
  error there before it leaves, and a rank whose collective failed reads the board to
  name the cause — the first rank that posted an error of its own; else a rank of the
  same machine whose process is gone (killed, ``os._exit``, crashed); else, after the
  collective timeout, the ranks that never posted.

Every rank of a board also counts a **heartbeat** in the store from a thread of its own,
every :func:`heartbeat_interval` (a twentieth of the collective timeout, between 0.25 and
5 s).  A stopped, hung or dead process stops counting, so a rank whose collective failed
names a silent peer as soon as its count has stood still for :func:`stale_after` (three
intervals, at least 1 s) instead of waiting out the grace, and the launcher
(:func:`gnnpar.train.launch.launch_workers`) stops such a rank at once.  A hung rank
therefore ends the run within ``T + 0.15 T`` and the exits, ``T`` the collective timeout
(the bound ``gnnpar-train`` documents is ``1.5 T``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch.distributed import Store, TCPStore  # type: ignore[attr-defined]

from gnnpar import errors
from gnnpar.comm import all_gather_ints
from gnnpar.distributed import DistContext
from gnnpar.errors import DistributedError, GnnparError

T = TypeVar("T")
_COMM_PATTERNS = ("gloo", "nccl", "connection closed", "connection reset", "broken pipe",
                  "timed out", "timeout")


def _describe(exc: BaseException) -> dict[str, Any]:
    info: dict[str, Any] = {"type": type(exc).__name__, "text": f"{type(exc).__name__}: {exc}"}
    if isinstance(exc, GnnparError):
        info.update(message=exc.message, path=exc.path, field=exc.field, fix=exc.fix)
    return info


def _rebuild(info: dict[str, Any], rank: int, world: int, others: list[int]) -> BaseException:
    also = f" (then ranks {others} failed too)" if others else ""
    cls = getattr(errors, info["type"], None)
    if isinstance(cls, type) and issubclass(cls, GnnparError) and "message" in info:
        return cls(f"rank {rank} of {world} failed{also}: {info['message']}",
                   path=info["path"], field=info["field"], fix=info["fix"], cause_rank=rank)
    return DistributedError(f"rank {rank} of {world} failed{also}: {info['text']}",
                            cause_rank=rank)


def agree(ctx: DistContext, error: BaseException | None) -> None:
    """Raise on every rank when any rank's step failed (collective; all ranks call it).

    Args:
        ctx: Distributed context.
        error: What this rank's step raised, or ``None``.

    Raises:
        The rank's own ``error``; on the other ranks, the first failed rank's error class
        (a :class:`~gnnpar.errors.GnnparError`) or :class:`DistributedError`, naming it.
    """
    report = b"" if error is None else json.dumps(_describe(error)).encode()
    lengths = all_gather_ints(ctx, [len(report)])[:, 0]
    failed = [r for r in range(ctx.world_size) if int(lengths[r]) > 0]
    if not failed:
        return
    width = int(lengths.max())
    mine = torch.zeros(width, dtype=torch.uint8)
    mine[: len(report)] = torch.tensor(list(report), dtype=torch.uint8)
    rows = [mine]
    if ctx.world_size > 1:
        mine = mine.to(ctx.device)
        rows = [torch.empty_like(mine) for _ in range(ctx.world_size)]
        dist.all_gather(rows, mine, group=ctx.group)
    if error is not None:
        raise error
    r = failed[0]
    info = json.loads(bytes(rows[r][: int(lengths[r])].cpu().tolist()).decode())
    peer = _rebuild(info, r, ctx.world_size, failed[1:])
    if isinstance(peer, GnnparError) and "message" in info:
        peer.reported_by_cause = True  # rank r is alive and prints its own error
    raise peer


def agreed(ctx: DistContext, step: Callable[[], T]) -> T:
    """Run ``step()`` on every rank, then :func:`agree` on its outcome (collective).

    Returns:
        What ``step`` returned, when it succeeded on every rank.
    """
    try:
        out, error = step(), None
    except Exception as exc:  # noqa: BLE001 - every rank must learn of it before raising
        out, error = None, exc
    agree(ctx, error)
    return out  # type: ignore[return-value]


def is_comm_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a failed or timed-out collective (a peer's failure, usually)."""
    if isinstance(exc, GnnparError):  # gnnpar's own verdict, even when it says "timeout"
        return False
    if isinstance(exc, dist.DistError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(p in text for p in _COMM_PATTERNS)


HEARTBEAT_KEY = "gnnpar/beat/{rank}"
"""The store key where rank ``rank`` counts its heartbeats (one per process and store)."""


def heartbeat_interval(timeout_s: float) -> float:
    """Seconds between heartbeats for a collective timeout of ``timeout_s`` seconds."""
    return min(5.0, max(0.25, timeout_s / 20))


def stale_after(timeout_s: float) -> float:
    """Seconds a heartbeat count must stand still before its process counts as not running."""
    return max(1.0, 3 * heartbeat_interval(timeout_s))


STARTUP_STALE_S = 30.0
"""Before training, a heartbeat may stand still at least this long: a rank that is still
importing or reading its part on a loaded machine can go seconds without the CPU its
heartbeat thread needs (seen: 12 s at a load of 15 on 2 cores).  A process that died is
still found at once (its pid is gone); a hang is still ended by the start-up timeout."""


def startup_stale_after(timeout_s: float, startup_timeout_s: float) -> float:
    """Seconds a heartbeat may stand still during start-up (:meth:`FailureBoard.settle`)."""
    return min(startup_timeout_s, max(STARTUP_STALE_S, 4 * stale_after(timeout_s)))


class HeartbeatWatch:
    """Which ranks' heartbeat counts have stood still, as seen from one observer's clock.

    Counts, not clock values, cross the store, so machines need no common clock: a rank
    is stale once its count has not changed for ``stale_s`` seconds of this process.

    Args:
        store: The store the ranks count in.
        ranks: The ranks to watch.
        stale_s: How long a count may stand still.
    """

    def __init__(self, store: Store, ranks: list[int], stale_s: float) -> None:
        self.store = store
        self.stale_s = stale_s
        now = time.monotonic()
        self._seen: dict[int, tuple[int, float]] = {r: (-1, now) for r in ranks}

    def update(self, ranks: list[int] | None = None) -> None:
        """Read the counts of ``ranks`` (default: every watched rank) once."""
        now = time.monotonic()
        for r in self._seen if ranks is None else ranks:
            count = self._seen[r][0]
            with contextlib.suppress(Exception):
                value = int(self.store.add(HEARTBEAT_KEY.format(rank=r), 0))
                if value != count:
                    self._seen[r] = (value, now)

    def stale(self) -> list[int]:
        """The watched ranks whose count has stood still for ``stale_s`` (after :meth:`update`)."""
        now = time.monotonic()
        return sorted(r for r, (_, since) in self._seen.items() if now - since >= self.stale_s)

    def silent_for(self, rank: int) -> float:
        """Seconds since ``rank``'s count last moved."""
        return time.monotonic() - self._seen[rank][1]


def _beat(addr: str, port: int, key: str, interval_s: float, stop: threading.Event) -> None:
    """The heartbeat thread: one count every ``interval_s`` until ``stop`` (or the store) ends."""
    with contextlib.suppress(Exception):  # the store gone (the run over): the thread ends
        store = TCPStore(addr, port, is_master=False, timeout=timedelta(seconds=10))
        while not stop.is_set():
            store.add(key, 1)
            stop.wait(interval_s)


def _process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine runs (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    return True


_HEARTBEATS: dict[tuple[str, int, int], tuple[threading.Thread, threading.Event]] = {}
"""The heartbeats this process counts, by (store address, port, rank)."""


def start_heartbeat(addr: str, port: int, rank: int, timeout_s: float) -> None:
    """Count rank ``rank``'s heartbeats in the store at ``addr:port`` (once per process).

    A daemon thread with its own store connection, stopped at exit (:func:`stop_heartbeats`)
    or when the store goes away.  It only adds to a store key and never issues a
    collective, so the one thread per device that NCCL allows is still the training one.
    """
    if (addr, port, rank) in _HEARTBEATS:
        return
    if not _HEARTBEATS:
        atexit.register(stop_heartbeats)
    stop = threading.Event()
    thread = threading.Thread(target=_beat, name=f"gnnpar-heartbeat-{rank}", daemon=True,
                              args=(addr, port, HEARTBEAT_KEY.format(rank=rank),
                                    heartbeat_interval(timeout_s), stop))
    _HEARTBEATS[(addr, port, rank)] = (thread, stop)
    thread.start()


def stop_heartbeats() -> None:
    """Stop this process's heartbeat threads and wait for them (registered at exit).

    A daemon thread still inside a store call when the interpreter finalizes would abort
    the process ("terminate called without an active exception"), so they end first.
    """
    for _, stop in _HEARTBEATS.values():
        stop.set()
    for thread, _ in _HEARTBEATS.values():
        thread.join(timeout=15)
    _HEARTBEATS.clear()


class FailureBoard:
    """Failure notices of one run in the launcher's key-value store.

    Each rank also registers its host and process id, so that a rank whose collective
    failed can tell, without waiting, which peers on its own machine have died.

    Args:
        ctx: Distributed context.
        store: The store (``None`` for a single rank, or without a launcher store:
            errors then pass through unchanged).
        grace_s: Longest wait of a rank whose collective failed for the others to post
            (default: 10 s, or a quarter of the collective timeout when shorter).  A rank
            that raises posts before it leaves, so its peers, whose collectives fail as it
            leaves, find its notice at once; a silent rank whose heartbeat stands still
            (:func:`stale_after`) is reported at once, and one that still beats but stays
            silent this long after a failed (or timed-out) collective is reported as hung.
    """

    def __init__(self, ctx: DistContext, store: Store | None,
                 grace_s: float | None = None) -> None:
        self.ctx = ctx
        self.store = store
        timeout_s = ctx.timeout.total_seconds()
        self.grace_s = min(10.0, timeout_s / 4) if grace_s is None else grace_s
        self.stale_s = stale_after(timeout_s)
        self.prefix = ""
        self.host = socket.gethostname()
        if store is not None:
            # Every rank opens the same sequence of boards, so per-rank counters agree.
            run = store.add(f"gnnpar/boards/{ctx.rank}", 1)
            self.prefix = f"gnnpar/board-{run}/"
            store.set(f"{self.prefix}process/{ctx.rank}",
                      json.dumps({"host": self.host, "pid": os.getpid()}))

    @classmethod
    def connect(cls, ctx: DistContext, grace_s: float | None = None) -> FailureBoard:
        """A board in the store at ``MASTER_ADDR:MASTER_PORT`` (none for a single rank).

        Also starts this process's heartbeat there (once per process and store).
        """
        store = None
        if ctx.world_size > 1 and "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
            addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
            store = TCPStore(addr, port, is_master=False, timeout=timedelta(seconds=30))
            start_heartbeat(addr, port, ctx.rank, ctx.timeout.total_seconds())
        return cls(ctx, store, grace_s)

    def post(self, exc: BaseException) -> None:
        """Publish this rank's failure (best effort: the store may be gone too)."""
        if self.store is None:
            return
        with contextlib.suppress(Exception):
            seq = self.store.add(self.prefix + "seq", 1)
            notice = {"seq": seq, "comm": is_comm_error(exc), "text": _describe(exc)["text"]}
            self.store.set(f"{self.prefix}failed/{self.ctx.rank}", json.dumps(notice))

    def _read(self, kind: str) -> dict[int, dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        if self.store is None:
            return out
        for r in range(self.ctx.world_size):
            key = f"{self.prefix}{kind}/{r}"
            with contextlib.suppress(Exception):
                if self.store.check([key]):
                    out[r] = json.loads(self.store.get(key).decode())
        return out

    def read(self) -> dict[int, dict[str, Any]]:
        """The failure notices posted so far, by rank."""
        return self._read("failed")

    def dead_here(self) -> list[int]:
        """Ranks on this machine whose process has exited."""
        return sorted(r for r, p in self._read("process").items()
                      if p["host"] == self.host and not _process_alive(int(p["pid"])))

    def explain(self, exc: BaseException) -> BaseException:
        """Post ``exc``; return it, or for a failed collective an error naming the cause.

        A rank whose own code raised gets its exception back (it is the cause).  A rank
        whose collective failed waits until a rank has posted an error of its own, a
        rank of this machine is seen dead, every rank has posted, the heartbeat of every
        silent rank has stood still for :attr:`stale_s`, or :attr:`grace_s` is up, and
        names what it learned.
        """
        self.post(exc)
        if self.store is None or not is_comm_error(exc):
            return exc
        world = self.ctx.world_size
        deadline = time.monotonic() + self.grace_s
        watch = HeartbeatWatch(self.store, [r for r in range(world) if r != self.ctx.rank],
                               self.stale_s)
        while True:
            notices = self.read()
            causes = sorted((n["seq"], r) for r, n in notices.items() if not n["comm"])
            dead = [r for r in self.dead_here() if r not in notices]
            silent = [r for r in range(world) if r not in notices]
            watch.update([r for r in silent if r != self.ctx.rank])
            stale = [r for r in watch.stale() if r in silent]
            if causes or dead or len(notices) == world or (silent and stale == silent) \
                    or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        here = f"rank {self.ctx.rank}'s collective failed: {str(exc).splitlines()[0][:300]}"
        if causes:
            r = causes[0][1]
            return DistributedError(f"rank {r} of {world} failed: {notices[r]['text']} "
                                    f"({here})", cause_rank=r)
        fix = "look at the failed rank's own output (its last lines)."
        if dead:
            return DistributedError(
                f"rank{'s' if len(dead) > 1 else ''} {', '.join(map(str, dead))} of {world} "
                f"died without reporting an error (killed, exited or crashed) ({here})",
                fix=fix, cause_rank=dead[0])
        if silent:
            which = f"rank{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))}"
            how = (f"stopped sending heartbeats (none in {watch.silent_for(silent[0]):.0f} s)"
                   if stale == silent else
                   f"did not report within {self.grace_s:.0f} s of the failed collective")
            return DistributedError(
                f"{which} of {world} {how}: hung, stopped or died (on another machine) "
                f"({here})", fix=fix, cause_rank=silent[0])
        return exc

    def settle(self, step: Callable[[], T], timeout_s: float, what: str) -> T:
        """:func:`agreed` through the store, before any collective: for slow start-up steps.

        Every rank runs ``step`` (loading and verifying its part, say) and posts its
        outcome in the store; every rank then waits, polling two counters, until all have
        posted, and raises as :func:`agree` does when any failed.  Nothing waits in a
        collective meanwhile, so a step slower than the collective timeout is no failure;
        the wait is bounded by ``timeout_s`` instead, and cut short when a rank's process
        is gone or its heartbeat stands still for :func:`startup_stale_after` (watched
        by rank 0, which posts the verdict; every rank watches rank 0): longer than in
        training, so that a loaded machine's slow start is no failure.  Without a store
        (one rank): :func:`agreed`.

        Args:
            step: What every rank runs.
            timeout_s: Longest wait for the slowest rank, from this rank's start.
            what: The step, in messages (``"load and verify its part"``).

        Returns:
            What ``step`` returned, when it succeeded on every rank.
        """
        if self.store is None:
            return agreed(self.ctx, step)
        store, rank, world = self.store, self.ctx.rank, self.ctx.world_size
        deadline = time.monotonic() + timeout_s
        key = f"{self.prefix}settle/"
        try:
            out, error = step(), None
        except Exception as exc:  # noqa: BLE001 - every rank must learn of it before raising
            out, error = None, exc
        if error is not None:
            store.set(f"{key}failed/{rank}", json.dumps(_describe(error)))
            store.add(f"{key}failures", 1)
        store.set(f"{key}done/{rank}", "1")
        store.add(f"{key}done", 1)
        watch = HeartbeatWatch(store, list(range(1, world)) if rank == 0 else [0],
                               startup_stale_after(self.ctx.timeout.total_seconds(),
                                                   timeout_s))
        while True:
            if store.check([f"{key}abort"]) and error is None:
                v = json.loads(store.get(f"{key}abort").decode())
                raise DistributedError(v["text"], cause_rank=v["rank"], fix=v["fix"])
            if int(store.add(f"{key}failures", 0)) or int(store.add(f"{key}done", 0)) == world:
                break
            watch.update()
            late = [r for r in watch.stale() if not store.check([f"{key}done/{r}"])]
            if rank == 0:
                late += [r for r in self.dead_here() if r not in late
                         and not store.check([f"{key}done/{r}"])]
            if late or time.monotonic() >= deadline:
                if error is not None:
                    raise error
                pending = [r for r in range(world) if not store.check([f"{key}done/{r}"])]
                why = (f"stopped sending heartbeats before it could {what}: hung, stopped "
                       "or died" if late else
                       f"did not {what} within the start-up timeout of {timeout_s:.0f} s")
                bad = sorted(late) or pending
                if not bad:  # every rank finished meanwhile
                    continue
                text = (f"rank{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad[:8]))} "
                        f"of {world} {why}.")
                fix = ("look at that rank's own output." if late else "raise "
                       "--startup-timeout-s (docs/startup.md: the part's bytes over the "
                       "file system's read rate), or make the ranks' reads faster.")
                if rank == 0:
                    store.set(f"{key}abort", json.dumps({"text": text, "fix": fix,
                                                         "rank": bad[0]}))
                raise DistributedError(text, cause_rank=bad[0], fix=fix)
            time.sleep(0.2)
        failed = sorted(r for r in range(world) if store.check([f"{key}failed/{r}"]))
        if error is not None:
            raise error
        if failed:
            info = json.loads(store.get(f"{key}failed/{failed[0]}").decode())
            peer = _rebuild(info, failed[0], world, failed[1:])
            if isinstance(peer, GnnparError) and "message" in info:
                peer.reported_by_cause = True  # that rank is alive and prints its own error
            raise peer
        return out  # type: ignore[return-value]

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Raise :meth:`explain`'s error for anything raised inside the block."""
        try:
            yield
        except Exception as exc:
            err = self.explain(exc)
            if err is exc:
                raise
            raise err from exc
