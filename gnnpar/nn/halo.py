"""Halo exchange: owned rows to the peers that hold them as halo, gradients back.

Every rank owns a contiguous range of global node ids and holds, as *halo*, the
in-neighbours of its owned nodes that other ranks own (``DistGraph.halo_gids``, sorted).
Before each aggregation a rank needs the current rows of its halo nodes; after the
backward pass the gradients of those rows belong to their owners.

:class:`HaloPlan` is the routing table, built once at load time with one exchange of the
halo ids: which owned rows go to which peer (``send_idx``, grouped by destination) and how
many rows arrive from each peer.  Because ``halo_gids`` is sorted and ownership is by id
range, the rows arriving from the peers, concatenated in rank order, are exactly the halo
slots in ``halo_gids`` order: no scatter is needed on the receiving side.

:class:`HaloExchange` runs the plan inside autograd (Megatron ``mappings.py`` shape: the
forward is one ``all_to_all`` of owned rows into the peers' halo slots; the backward is
its adjoint, one ``all_to_all`` of halo-row gradients back to their owners, added into
the owned rows' gradients).  Two communication reducers are switches on it:

* **boundary-node sampling** (BNS-GCN, ``boundary_p``): per epoch each boundary row is
  sent with probability ``p`` and scaled by ``1/p`` (an unbiased estimate of the halo
  matrix; rows not sent are zero).  Both sides draw the same Bernoulli mask from
  ``(seed, epoch, sender, receiver)``, so no indices travel.
* **stale halos** (PipeGCN, ``stale``): a layer uses the halo rows of the previous
  iteration, whose exchange ran while that iteration computed; halo gradients are
  likewise applied one iteration late.  The first training iteration is exact.

Evaluation (``training=False``) is always exact.  Byte counters go to
:class:`~gnnpar.comm.CommStats` under ``"halo"`` (forward rows) and ``"halo_grad"``
(backward rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnpar.comm import CommStats, PendingExchange, all_to_all_v, start_all_to_all_v
from gnnpar.device import upload
from gnnpar.distributed import DistContext, skips_collectives
from gnnpar.errors import ConfigError, PartitionError
from gnnpar.faults import agreed
from gnnpar.storage.graph import DistGraph


@dataclass(frozen=True)
class HaloPlan:
    """Routing table of one rank's halo exchange.

    Attributes:
        num_owned: Rows this rank owns.
        num_halo: Halo rows this rank receives.
        send_idx: int64 ``[S]`` local ids of the owned rows sent, grouped by destination
            rank (rank 0's first) and, within a destination, in its ``halo_gids`` order.
        send_counts: int64 ``[world_size]`` rows sent to each rank (CPU).
        recv_counts: int64 ``[world_size]`` halo rows received from each rank (CPU).
    """

    num_owned: int
    num_halo: int
    send_idx: Tensor
    send_counts: Tensor
    recv_counts: Tensor

    @classmethod
    def build(cls, graph: DistGraph, ctx: DistContext, stats: CommStats | None = None,
              device: torch.device | None = None) -> HaloPlan:
        """Derive the send lists from every peer's halo ids (one exchange; collective).

        Args:
            graph: This rank's part.
            ctx: Distributed context (one part per rank).
            stats: Counters for the setup exchange (kind ``"halo_setup"``).
            device: Device of ``send_idx`` (default: that of ``graph``'s tensors).

        Returns:
            The plan of this rank.

        Raises:
            PartitionError: On every rank, when any rank's halo ids are damaged or do not
                fit its peers' parts.
        """
        halo = graph.halo_gids

        def owners() -> Tensor:
            owner = graph.owner(halo)
            if bool(halo.numel() > 1 and (halo[1:] <= halo[:-1]).any()) or bool(
                    ((owner < 0) | (owner >= ctx.world_size) | (owner == graph.rank)).any()):
                raise PartitionError(
                    "halo ids are not sorted and unique, or name nodes the part owns itself "
                    f"or nodes outside the graph (parts [{graph.rank}])",
                    path=f"part-{graph.rank}", field="halo_gids",
                    fix="re-create the partition with gnnpar-partition.")
            return owner

        recv_counts = torch.bincount(agreed(ctx, owners), minlength=ctx.world_size)
        requested, send_list = all_to_all_v(ctx, halo.to(ctx.device), recv_counts.to(ctx.device),
                                            stats=stats, kind="halo_setup")
        send_counts = torch.tensor(send_list, dtype=torch.int64)

        def local_ids() -> Tensor:
            send_idx = requested - graph.first_gid
            if bool(((send_idx < 0) | (send_idx >= graph.num_owned)).any()):
                raise PartitionError(
                    "a peer lists as halo a node this part does not own: the parts come "
                    f"from different partitions (parts [{graph.rank}])",
                    path=f"part-{graph.rank}", field="halo_gids",
                    fix="load every part from the same partition directory.")
            return send_idx

        send_idx = agreed(ctx, local_ids)
        if device is not None:
            send_idx = send_idx.to(device)
        return cls(graph.num_owned, graph.num_halo, send_idx, send_counts, recv_counts.cpu())

    def gather_halo(self, ctx: DistContext, values: Tensor,
                    stats: CommStats | None = None, kind: str = "halo",
                    out: Tensor | None = None) -> Tensor:
        """Rows of the halo nodes, fetched from their owners (no autograd).

        Args:
            ctx: Distributed context.
            values: ``[num_owned, *F]`` one row per owned node.
            stats: Counters to add the exchange to.
            kind: Counter name.
            out: Contiguous ``[num_halo, *F]`` buffer to receive them in (default: new).

        Returns:
            ``[num_halo, *F]`` rows in ``halo_gids`` order (``out`` when given).
        """
        return start_all_to_all_v(ctx, values.index_select(0, self.send_idx), self.send_counts,
                                  self.recv_counts, stats=stats, kind=kind, out=out).wait()


@dataclass(frozen=True)
class _Route:
    """One exchange's routing: the full plan, or a boundary-node sample of it.

    ``recv_pos`` lists the halo slots that receive a row (on the plan's device; ``None``:
    all, in order) and
    ``scale`` multiplies the received rows (``1/p`` under sampling).
    """

    plan: HaloPlan
    send_idx: Tensor
    send_counts: Tensor
    recv_counts: Tensor
    recv_pos: Tensor | None = None
    scale: float = 1.0


def _exact_route(plan: HaloPlan) -> _Route:
    return _Route(plan, plan.send_idx, plan.send_counts, plan.recv_counts)


def _sampled_route(plan: HaloPlan, rank: int, p: float, seed: int, epoch: int) -> _Route:
    """Keep each boundary row with probability ``p``; both ends draw the same mask.

    The masks are drawn on the host (counts must be known there) and the kept positions
    are moved to the device without waiting: no host read of device values.
    """
    world = len(plan.send_counts)

    def mask(src: int, dst: int, n: int) -> Tensor:
        state = np.random.SeedSequence([seed, epoch, src, dst]).generate_state(1)[0]
        gen = torch.Generator().manual_seed(int(state))
        return torch.rand(n, generator=gen, dtype=torch.float64) < p

    send_mask = torch.cat([mask(rank, d, int(plan.send_counts[d])) for d in range(world)])
    recv_mask = torch.cat([mask(s, rank, int(plan.recv_counts[s])) for s in range(world)])
    owner_of_send = torch.repeat_interleave(torch.arange(world), plan.send_counts)
    owner_of_recv = torch.repeat_interleave(torch.arange(world), plan.recv_counts)
    dev = plan.send_idx.device
    return _Route(
        plan,
        plan.send_idx.index_select(0, upload(torch.nonzero(send_mask).flatten(), dev)),
        torch.bincount(owner_of_send[send_mask], minlength=world),
        torch.bincount(owner_of_recv[recv_mask], minlength=world),
        recv_pos=upload(torch.nonzero(recv_mask).flatten(), dev),
        scale=1.0 / p,
    )


def _owned_part(x: Tensor, route: _Route) -> Tensor:
    """``[num_owned + num_halo, F]`` holding ``x`` and, under sampling, zero halo rows."""
    n = route.plan.num_owned
    out = x.new_empty((n + route.plan.num_halo, *x.shape[1:]))
    out[:n] = x
    if route.recv_pos is not None:
        out[n:] = 0
    return out


def _fill_halo(out: Tensor, halo: Tensor, route: _Route) -> Tensor:
    """Write the received (scaled) halo rows into their slots of ``out``."""
    n = route.plan.num_owned
    if route.scale != 1.0:
        halo = halo * route.scale
    if route.recv_pos is None:
        out[n:] = halo
    else:
        out[n + route.recv_pos] = halo
    return out


def _halo_grad(grad: Tensor, route: _Route) -> Tensor:
    """Gradients of the halo rows that were received, in arrival order, scaled."""
    g = grad[route.plan.num_owned:]
    if route.recv_pos is not None:
        g = g[route.recv_pos]
    return g * route.scale if route.scale != 1.0 else g


def _start_grad_return(ctx: DistContext, grad: Tensor, route: _Route,
                       stats: CommStats | None) -> PendingExchange:
    """Send halo-row gradients back to their owners (the adjoint of the forward)."""
    return start_all_to_all_v(ctx, _halo_grad(grad, route).contiguous(), route.recv_counts,
                              route.send_counts, stats=stats, kind="halo_grad")


def _apply(fn: type[torch.autograd.Function], *args: Any) -> Tensor:
    """``fn.apply(*args)``, typed (``Function.apply`` is untyped in torch's stubs)."""
    out: Tensor = fn.apply(*args)  # type: ignore[no-untyped-call]
    return out


class _ExchangeFn(torch.autograd.Function):
    """Owned rows -> owned + halo rows; backward returns halo gradients to their owners."""

    @staticmethod
    def forward(fctx: torch.autograd.function.FunctionCtx, x: Tensor, route: _Route,
                ctx: DistContext, stats: CommStats | None) -> Tensor:
        fctx.route, fctx.ctx, fctx.stats = route, ctx, stats  # type: ignore[attr-defined]
        pending = start_all_to_all_v(ctx, x.index_select(0, route.send_idx.to(x.device)),
                                     route.send_counts, route.recv_counts, stats=stats,
                                     kind="halo")
        out = _owned_part(x, route)  # local copy while the rows are in flight
        return _fill_halo(out, pending.wait(), route)

    @staticmethod
    def backward(fctx: torch.autograd.function.FunctionCtx,
                 grad: Tensor) -> tuple[Tensor | None, ...]:
        route: _Route = fctx.route  # type: ignore[attr-defined]
        back = _start_grad_return(fctx.ctx, grad, route, fctx.stats)  # type: ignore[attr-defined]
        g = grad[: route.plan.num_owned].clone()
        g.index_add_(0, route.send_idx.to(g.device), back.wait())
        return g, None, None, None


@dataclass
class PipelineState:
    """Per-layer state of stale (PipeGCN) exchanges: the exchanges still in flight.

    Attributes:
        halo: This layer's halo rows for the next iteration (sent during this one).
        grad: Halo gradients on their way back to their owners, to be added into the
            owned rows' gradients in the next iteration's backward pass.
    """

    halo: PendingExchange | None = None
    grad: PendingExchange | None = None

    def flush(self) -> None:
        """Wait for every exchange in flight and forget the stale rows."""
        for pending in (self.halo, self.grad):
            if pending is not None:
                pending.wait()
        self.halo = self.grad = None


class _StaleFn(torch.autograd.Function):
    """Owned rows + last iteration's halo rows; gradients return one iteration late."""

    @staticmethod
    def forward(fctx: torch.autograd.function.FunctionCtx, x: Tensor, halo: Tensor,
                route: _Route, ctx: DistContext, stats: CommStats | None,
                state: PipelineState) -> Tensor:
        fctx.route, fctx.ctx, fctx.stats, fctx.state = (  # type: ignore[attr-defined]
            route, ctx, stats, state)
        return _fill_halo(_owned_part(x, route), halo, route)

    @staticmethod
    def backward(fctx: torch.autograd.function.FunctionCtx,
                 grad: Tensor) -> tuple[Tensor | None, ...]:
        route: _Route = fctx.route  # type: ignore[attr-defined]
        state: PipelineState = fctx.state  # type: ignore[attr-defined]
        late = state.grad
        state.grad = _start_grad_return(fctx.ctx, grad, route, fctx.stats)  # type: ignore[attr-defined]
        g = grad[: route.plan.num_owned].clone()
        if late is not None:
            g.index_add_(0, route.send_idx.to(g.device), late.wait())
        return g, None, None, None, None, None


class HaloExchange:
    """Halo exchange of one partitioned graph, with the communication reducers as switches.

    Args:
        plan: Routing table (:meth:`HaloPlan.build`).
        ctx: Distributed context.
        stats: Byte counters (kinds ``"halo"`` and ``"halo_grad"``).
        boundary_p: BNS-GCN: send each boundary row with this probability per epoch and
            scale it by ``1/p`` (``None``: exact; ``1.0`` samples every row).
        stale: PipeGCN: use the previous iteration's halo rows and gradients.
        seed: Seed of the boundary samples (the same on every rank).

    Example::

        halo = gnnpar.HaloGraph.build(graph, ctx, boundary_p=0.1)   # BNS-GCN
        x_all = halo.exchange(x_owned, training=True)   # [num_owned + num_halo, F]
    """

    def __init__(self, plan: HaloPlan, ctx: DistContext, *, stats: CommStats | None = None,
                 boundary_p: float | None = None, stale: bool = False, seed: int = 0) -> None:
        if boundary_p is not None and not 0.0 < boundary_p <= 1.0:
            raise ConfigError(f"boundary_p={boundary_p} is not a probability in (0, 1].",
                              field="boundary_p", fix="pass 0 < p <= 1, or None for exact.")
        if boundary_p is not None and stale:
            raise ConfigError("boundary sampling and stale halos cannot be combined.",
                              field="boundary_p/stale", fix="switch on one of them.")
        self.plan = plan
        self.ctx = ctx
        self.stats = stats
        self.boundary_p = boundary_p
        self.stale = stale
        self.seed = seed
        self._exact = _exact_route(plan)
        self._train = self._exact
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Draw the boundary sample of ``epoch`` (call at the start of every epoch)."""
        if self.boundary_p is not None:
            self._train = _sampled_route(self.plan, self.ctx.rank, self.boundary_p,
                                         self.seed, epoch)

    def __call__(self, x: Tensor, training: bool = False,
                 state: PipelineState | None = None) -> Tensor:
        """Extend owned rows with the halo rows.

        Args:
            x: ``[num_owned, F]`` rows of the owned nodes.
            training: Apply the reducers (evaluation is always exact).
            state: The calling layer's pipeline state (required when ``stale``).

        Returns:
            ``[num_owned + num_halo, F]``: ``x``, then the halo rows in ``halo_gids`` order.
        """
        if x.size(0) != self.plan.num_owned:
            raise ConfigError(f"got {x.size(0)} rows but this rank owns {self.plan.num_owned} "
                              "nodes.", field="x", fix="pass one row per owned node.")
        if skips_collectives(self.ctx.world_size):
            return x
        if not (training and self.stale):
            route = self._train if training else self._exact
            return _apply(_ExchangeFn, x, route, self.ctx, self.stats)
        if state is None:
            raise ConfigError("stale halos need the layer's PipelineState.", field="state",
                              fix="pass the calling layer's PipelineState.")
        if state.halo is None:  # first iteration: exact, and its halo serves the next one
            out = _apply(_ExchangeFn, x, self._exact, self.ctx, self.stats)
            halo = out[self.plan.num_owned:].detach().clone()
            state.halo = PendingExchange(halo, self.plan.recv_counts.tolist())
            return out
        halo = state.halo.wait()
        state.halo = start_all_to_all_v(
            self.ctx, x.detach().index_select(0, self.plan.send_idx.to(x.device)),
            self.plan.send_counts, self.plan.recv_counts, stats=self.stats, kind="halo")
        return _apply(_StaleFn, x, halo, self._exact, self.ctx, self.stats, state)
