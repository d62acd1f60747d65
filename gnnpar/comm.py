"""Variable-size all-to-all exchange and the byte counters of every collective.

Every remote access in gnnpar — feature rows, sampled adjacency, halo rows and their
gradients — is one :func:`all_to_all_v`: the sender buckets its payload by destination
rank, the counts go first (one ``all_to_all_single`` of ``world_size`` integers), the
payload second.  :class:`CommStats` counts rows and bytes of each exchange by kind, so a
run can report its communication volume, the figure that carries over from a laptop to a
cluster.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import socket
import time
import zlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from gnnpar.distributed import DistContext, skips_collectives

# torch >= 2.13 renames all_gather_into_tensor (and deprecates the old name).
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass
class CommCounter:
    """Rows and bytes one rank sent and received for one kind of exchange."""

    calls: int = 0
    rows_sent: int = 0
    rows_recv: int = 0
    bytes_sent: int = 0
    bytes_recv: int = 0
    wait_s: float = 0.0


@dataclass
class CommStats:
    """Counters by kind (``"feature"``, ``"sample"``, ``"halo"``, ...) for one rank.

    Example::

        stats = gnnpar.CommStats()
        store = gnnpar.DistFeatureStore(graph, ctx, stats=stats)
        store.gather(batch.n_id)
        print(stats.as_dict()["feature"]["bytes_recv"])     # this rank's received bytes
    """

    counters: dict[str, CommCounter] = field(default_factory=lambda: defaultdict(CommCounter))

    def record(
        self, kind: str, rows_sent: int, rows_recv: int, bytes_sent: int, bytes_recv: int
    ) -> None:
        """Add one exchange to the counters of ``kind``."""
        c = self.counters[kind]
        c.calls += 1
        c.rows_sent += rows_sent
        c.rows_recv += rows_recv
        c.bytes_sent += bytes_sent
        c.bytes_recv += bytes_recv

    def add_wait(self, kind: str, seconds: float) -> None:
        """Add time this rank spent blocked in an exchange of ``kind``."""
        self.counters[kind].wait_s += seconds

    def reset(self) -> None:
        """Zero every counter."""
        self.counters.clear()

    @contextlib.contextmanager
    def redirect(self, other: CommStats) -> Iterator[None]:
        """Inside the block, exchanges recorded here are added to ``other`` instead.

        The components of a run share one :class:`CommStats`; a trainer counts its
        evaluation apart from its training steps with ``with stats.redirect(eval_stats)``.
        """
        saved, self.counters = self.counters, other.counters
        try:
            yield
        finally:
            self.counters = saved

    def as_dict(self) -> dict[str, dict[str, int]]:
        """Counters as plain dicts, for JSON run records."""
        return {k: dict(vars(v)) for k, v in sorted(self.counters.items())}

    def total_bytes(self) -> int:
        """Bytes sent plus received over all kinds."""
        return sum(c.bytes_sent + c.bytes_recv for c in self.counters.values())


def ring_bytes(nbytes: float, group_size: int, kind: str = "all_reduce") -> float:
    """Bytes each rank sends (and receives) in a ring collective of ``nbytes``.

    The ring algorithms of gloo and NCCL: an all-reduce sends ``2 (g - 1) / g`` of the
    tensor per rank (reduce-scatter, then all-gather); an all-gather, reduce-scatter,
    all-to-all or broadcast ``(g - 1) / g``.  Integer counters round the result.

    Args:
        nbytes: Size of the tensor (for all-gather the gathered output, for
            reduce-scatter the input); element counts work the same way.
        group_size: Ranks in the group (``g``); 0 bytes for one rank.
        kind: ``"all_reduce"``, or any other collective for the ``(g - 1) / g`` factor.

    Returns:
        The bytes per rank, unrounded.
    """
    if group_size <= 1:
        return 0.0
    factor = 2 * (group_size - 1) / group_size if kind == "all_reduce" else (
        (group_size - 1) / group_size)
    return nbytes * factor


def record_all_reduce(stats: CommStats, kind: str, tensor: torch.Tensor,
                      group_size: int) -> None:
    """Count one ring all-reduce of ``tensor`` over ``group_size`` ranks as ``kind``.

    Rows are the elements sent (the tensor is flat), each way:
    ``round(ring_bytes(numel, g))`` rows and ``round(ring_bytes(nbytes, g))`` bytes.
    """
    rows = round(ring_bytes(tensor.numel(), group_size))
    nbytes = round(ring_bytes(tensor.numel() * tensor.element_size(), group_size))
    stats.record(kind, rows, rows, nbytes, nbytes)


Counts = Sequence[int] | torch.Tensor
"""Per-rank row counts known on the host: a list, or a CPU tensor (a device tensor would
cost a host synchronisation to read)."""


def _host(counts: Counts) -> list[int]:
    return counts.tolist() if isinstance(counts, torch.Tensor) else [int(c) for c in counts]


def exchange_counts(ctx: DistContext, send_counts: torch.Tensor) -> tuple[list[int], list[int]]:
    """Tell every peer how many items it will receive from this rank (collective).

    The counts travel on ``ctx.device`` and come back to the host together: one host
    synchronisation.

    Args:
        ctx: Distributed context.
        send_counts: ``[world_size]`` integer counts (any device), entry ``r`` for rank ``r``.

    Returns:
        ``(send, recv)`` as host lists: ``recv[r]`` is what rank ``r`` will send here.
    """
    send = send_counts.to(device=ctx.device, dtype=torch.int64)
    if skips_collectives(ctx.world_size):
        host = send.tolist()
        return host, list(host)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=ctx.group)
    both = torch.stack([send, recv]).tolist()
    return both[0], both[1]


def all_gather_counts(ctx: DistContext, counts: torch.Tensor
                      ) -> tuple[torch.Tensor, list[list[int]]]:
    """Every rank's ``counts`` (collective), on the device and on the host.

    The counts travel on ``ctx.device``; the host copy is one host synchronisation.

    Returns:
        ``(on_device, on_host)``: int64 ``[world_size, len]`` and its rows as lists; row
        ``r`` is rank ``r``'s counts.
    """
    out = all_gather_rows(ctx, counts.to(device=ctx.device, dtype=torch.int64))
    return out, out.tolist()


def all_gather_rows(ctx: DistContext, mine: torch.Tensor) -> torch.Tensor:
    """Every rank's ``mine`` (collective; the same length and dtype on every rank).

    Returns:
        ``[world_size, mine.numel()]`` on ``ctx.device``; row ``r`` is rank ``r``'s.
    """
    mine = mine.to(ctx.device).reshape(-1)
    if skips_collectives(ctx.world_size):
        return mine[None]
    out = torch.empty(ctx.world_size * mine.numel(), dtype=mine.dtype, device=ctx.device)
    _all_gather_single(out, mine, group=ctx.group)
    return out.view(ctx.world_size, -1)


def all_to_all_v(
    ctx: DistContext,
    send: torch.Tensor,
    send_counts: torch.Tensor | Counts,
    recv_counts: Counts | None = None,
    *,
    stats: CommStats | None = None,
    kind: str = "other",
) -> tuple[torch.Tensor, list[int]]:
    """Exchange rows of different counts with every rank in one collective.

    Args:
        ctx: Distributed context.
        send: Rows grouped by destination rank (rank 0's first), shape ``[S, *]``, on
            ``ctx.device``.
        send_counts: ``[world_size]`` rows for each rank; sums to ``S``.
        recv_counts: What each rank sends here, when already known on the host (saves the
            count exchange and its host synchronisation, e.g. when replying to a request).
        stats: Counters to add this exchange to (rows and bytes that left this rank or
            arrived from another; the part sent to itself is not counted).
        kind: Counter name.

    Returns:
        ``(recv, recv_counts)``: received rows grouped by source rank, and the counts.

    Shapes:
        send: ``[S, *F]``; recv: ``[sum(recv_counts), *F]``.
    """
    if recv_counts is None:
        counts = send_counts if isinstance(send_counts, torch.Tensor) else torch.tensor(
            list(send_counts), dtype=torch.int64)
        send_counts, recv_counts = exchange_counts(ctx, counts)
    pending = start_all_to_all_v(ctx, send, send_counts, recv_counts, stats=stats, kind=kind)
    return pending.wait(), pending.recv_counts


@dataclass
class PendingExchange:
    """An :func:`all_to_all_v` in flight; :meth:`wait` returns the received rows.

    Attributes:
        recv: Buffer the rows arrive in (complete only after :meth:`wait`).
        recv_counts: Rows arriving from each rank (host).
        work: The collective's handle (``None`` when nothing crosses a process boundary).
        send: The payload, kept alive until the collective completes.
        stats: Counters that :meth:`wait`'s blocked time is added to (under ``kind``).
        kind: Counter name.
    """

    recv: torch.Tensor
    recv_counts: list[int]
    work: dist.Work | None = None
    send: torch.Tensor | None = None
    stats: CommStats | None = None
    kind: str = "other"

    def wait(self) -> torch.Tensor:
        """Block until the rows have arrived and return them."""
        if self.work is not None:
            t0 = time.perf_counter()
            self.work.wait()
            if self.stats is not None:
                self.stats.add_wait(self.kind, time.perf_counter() - t0)
            self.work = None
            self.send = None
        return self.recv


def start_all_to_all_v(
    ctx: DistContext,
    send: torch.Tensor,
    send_counts: Counts,
    recv_counts: Counts,
    *,
    stats: CommStats | None = None,
    kind: str = "other",
    out: torch.Tensor | None = None,
) -> PendingExchange:
    """Start :func:`all_to_all_v` with host-known counts and return without waiting.

    Lets the caller overlap local work with the exchange (copying local rows, computing
    the next layer); the bytes are counted when the exchange starts.  Nothing here reads
    the device.

    Args:
        ctx: Distributed context.
        send: Rows grouped by destination rank, shape ``[S, *F]``, on ``ctx.device``.
        send_counts: Rows for each rank (host); sums to ``S``.
        recv_counts: Rows each rank sends here (host).
        stats: Counters to add this exchange to.
        kind: Counter name.
        out: Contiguous ``[sum(recv_counts), *F]`` buffer the rows arrive in (default: a
            new one), e.g. a slice of a larger tensor, saving a copy.

    Returns:
        The exchange in flight; ``wait()`` gives ``[sum(recv_counts), *F]`` rows grouped by
        source rank.
    """
    sent, got = _host(send_counts), _host(recv_counts)
    row_shape = tuple(send.shape[1:])
    n_recv = sum(got)
    if stats is not None:
        row_bytes = send.element_size() * math.prod(row_shape)
        me = ctx.rank
        rows_sent, rows_recv = sum(sent) - sent[me], n_recv - got[me]
        stats.record(kind, rows_sent, rows_recv, rows_sent * row_bytes, rows_recv * row_bytes)
    if skips_collectives(ctx.world_size):
        return PendingExchange(send if out is None else out.copy_(send), got)
    recv = send.new_empty((n_recv, *row_shape)) if out is None else out
    send = send.contiguous()
    work = dist.all_to_all_single(recv, send, output_split_sizes=got, input_split_sizes=sent,
                                  group=ctx.group, async_op=True)
    return PendingExchange(recv, got, work, send, stats, kind)


def all_reduce_sum(ctx: DistContext, values: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over all ranks (a copy; the input is left as it was)."""
    out = values.clone()
    if not skips_collectives(ctx.world_size):
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=ctx.group)
    return out


def per_rank(ctx: DistContext, values: list[float]) -> list[list[float]]:
    """Every rank's float ``values`` (same length on every rank), one list per value.

    Returns:
        ``out[i][r]`` is rank ``r``'s ``values[i]`` (one all-reduce of a float64 table).
    """
    table = torch.zeros(len(values), ctx.world_size, dtype=torch.float64, device=ctx.device)
    table[:, ctx.rank] = torch.tensor(values, dtype=torch.float64)
    out: list[list[float]] = all_reduce_sum(ctx, table).tolist()
    return out


def all_gather_ints(ctx: DistContext, values: list[int]) -> torch.Tensor:
    """Every rank's ``values`` (same length on every rank), for agreement checks.

    Returns:
        int64 ``[world_size, len(values)]``; row ``r`` is rank ``r``'s values.
    """
    return all_gather_counts(ctx, torch.tensor(values, dtype=torch.int64))[0].cpu()


def ranks_on_this_host(ctx: DistContext) -> int:
    """How many ranks of the group run on this machine, this one included (collective).

    Ranks whose host names are equal share a machine: under ``torchrun`` the agents of
    several "nodes" may be one machine, so ``LOCAL_WORLD_SIZE`` (one agent's ranks) can
    count too few.
    """
    return len(colocated_ranks(ctx))


def colocated_ranks(ctx: DistContext) -> list[int]:
    """The ranks of the group on this machine, this one included, ascending (collective).

    Ranks whose host names are equal share a machine (see :func:`ranks_on_this_host`).
    """
    if skips_collectives(ctx.world_size):
        return [ctx.rank]
    name = hashlib.blake2b(socket.gethostname().encode(), digest_size=7).digest()
    hosts = all_gather_ints(ctx, [int.from_bytes(name, "little")])[:, 0]
    return [int(r) for r in torch.nonzero(hosts == hosts[ctx.rank]).view(-1).tolist()]


def broadcast_text(ctx: DistContext, text: str, src: int = 0) -> str:
    """Rank ``src``'s ``text`` on every rank (collective; UTF-8 bytes, nothing unpickled)."""
    if skips_collectives(ctx.world_size):
        return text
    data = text.encode() if ctx.rank == src else b""
    size = int(all_gather_ints(ctx, [len(data)])[src, 0])
    buf = torch.zeros(size, dtype=torch.uint8)
    if ctx.rank == src:
        buf[:] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    buf = buf.to(ctx.device)
    dist.broadcast(buf, src=src, group=ctx.group)
    return bytes(buf.cpu().tolist()).decode()


def comm_totals(stats: CommStats, ctx: DistContext) -> dict[str, dict[str, int]]:
    """Rows and bytes sent by all ranks together, by kind (collective).

    Ranks may count different kinds (pipeline stages: ``send`` on one, ``recv`` on the
    next): the totals are over the union of the kinds, a rank without a kind adding 0.

    Args:
        stats: This rank's counters.
        ctx: Distributed context.

    Returns:
        ``{kind: {"rows": ..., "bytes": ...}}``; what was sent equals what was received.
    """
    kinds = sorted(stats.counters)
    check = all_gather_ints(ctx, [len(kinds), zlib.crc32(",".join(kinds).encode())])
    if bool((check != check[0]).any()):  # every rank's kinds, once per rank
        kinds = sorted({k for r in range(ctx.world_size)
                        for k in broadcast_text(ctx, ",".join(kinds), src=r).split(",") if k})
    if not kinds:
        return {}
    none = CommCounter()
    sent = torch.tensor([[stats.counters.get(k, none).rows_sent,
                          stats.counters.get(k, none).bytes_sent] for k in kinds],
                        dtype=torch.int64)
    total = all_reduce_sum(ctx, sent.to(ctx.device)).cpu().tolist()
    return {k: {"rows": r, "bytes": b} for k, (r, b) in zip(kinds, total, strict=True)}


class _GradCounter:
    """State of the DDP communication hook that counts gradient all-reduce traffic."""

    def __init__(self, stats: CommStats, world_size: int,
                 group: dist.ProcessGroup | None) -> None:
        self.stats = stats
        self.world_size = world_size
        self.group = group


# DDP checks a hook's annotations as objects, which postponed (string) annotations are not.
def _counted_allreduce(state: _GradCounter, bucket):  # type: ignore[no-untyped-def]
    """DDP's own all-reduce, counted as kind ``"grad"`` (see :func:`ring_bytes`)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    record_all_reduce(state.stats, "grad", bucket.buffer(), state.world_size)
    return allreduce_hook(state.group, bucket)  # type: ignore[arg-type]


def count_gradients(ddp: DistributedDataParallel, stats: CommStats, world_size: int,
                    group: dist.ProcessGroup | None) -> None:
    """Count ``ddp``'s gradient all-reduce in ``stats`` as kind ``"grad"`` (ring bytes).

    DDP keeps its own all-reduce (a communication hook that records, then calls torch's
    default ``allreduce_hook`` on ``group``).
    """
    ddp.register_comm_hook(_GradCounter(stats, world_size, group), _counted_allreduce)
