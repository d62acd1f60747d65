"""Sharded learnable node embeddings and their sparse optimisers (DistDGL's ``DistEmbedding``).

Featureless nodes (most types of ogbn-mag, MAG240M, IGBH) learn an input row each.
:class:`DistEmbedding` shards the table by owner: each rank holds the rows of the nodes it
owns (of the given node types), in local-id order.  Calling it on a batch's global ids
gathers their rows through the feature store's exchange (one round trip, remote ids only,
kind ``"embedding"``) and records the rows it returned; after ``backward`` a sparse
optimiser (:class:`SparseAdam` or :class:`SparseAdagrad`) sends each row's gradient to its
owner in **one** exchange (the distinct ids of the rank's batches, their gradients summed
first; ids packed into the same rows; kind ``"embedding_grad"``), and the owner updates
only the rows that were touched.

The arithmetic is that of ``torch.optim.SparseAdam`` / ``torch.optim.Adagrad`` on a
``torch.nn.Embedding(sparse=True)`` whose loss is the mean over the global batch: the
gradients every rank sends for one row are summed and divided by the world size, as DDP
averages the dense gradients of a loss scaled by ``world_size / global_batch_size``; the
step count is global (every rank steps every step).  Rows start from a counter-based hash
of the node's dataset id, so the initial table does not depend on the partitioning.

Checkpoints hold the whole table and the optimiser state in dataset-id order
(:func:`gather_state`, collective, written by rank 0), so a run resumes with the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnpar.comm import CommStats, all_to_all_v, exchange_counts
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.keys import MASK62, mix, mix_int
from gnnpar.ops import count
from gnnpar.storage.features import DistFeatureStore
from gnnpar.storage.graph import DistGraph

HOST_SYNCS = 4
"""Host reads of one gather of a batch's rows (its exchanged counts) and one optimiser
update (the distinct ids, the gradients' counts, the owner's distinct rows)."""


def hashed_uniform(ids: Tensor, dim: int, seed: int, scale: float,
                   chunk_rows: int = 1 << 14) -> Tensor:
    """``[n, dim]`` float32 rows uniform in ``[-scale, scale)``, a pure function of the ids.

    Made in chunks of ``chunk_rows`` rows, so the temporaries stay a few MiB.
    """
    cols = torch.arange(dim, dtype=torch.int64)
    salt = mix_int(seed, dim)
    out = torch.empty((ids.numel(), dim), dtype=torch.float32)
    for a in range(0, ids.numel(), chunk_rows):
        z = mix(ids[a:a + chunk_rows].to(torch.int64)[:, None] * dim + cols + salt)
        out[a:a + chunk_rows] = (z & MASK62).to(torch.float64).mul_(2.0**-61).sub_(1) \
            .mul_(scale)
    return out


class DistEmbedding:
    """A learnable ``[num_nodes, dim]`` table, each row held by the rank owning its node.

    Args:
        graph: This rank's part.
        ctx: Distributed context.
        dim: Embedding width.
        types: Typed graphs: the node types it covers (``None``: every node).
        name: Its name in checkpoints.
        seed: Seed of the initial rows (:func:`hashed_uniform`).
        scale: Initial rows are uniform in ``[-scale, scale)``.
        stats: Byte counters (kinds ``"embedding"``, ``"embedding_ids"``, ``"embedding_grad"``).
        device: Where the held rows live (default ``ctx.device``; placed as the feature
            store places rows: on the device, or pinned host memory it reads in place).

    Attributes:
        weight: ``[rows, dim]`` the rows this rank holds (updated in place by the optimiser).
        orig_ids: ``[rows]`` dataset id of each held row's node (CPU).

    Example::

        emb = DistEmbedding(graph, ctx, 64, types=(1, 2))
        opt = SparseAdam([emb], lr=0.01)
        x = emb(batch["author"].n_id)      # collective
        loss.backward(); opt.step()        # collective: gradients to the owners
    """

    def __init__(self, graph: DistGraph, ctx: DistContext, dim: int,
                 types: tuple[int, ...] | None = None, name: str = "embedding", seed: int = 0,
                 scale: float = 1.0, stats: CommStats | None = None,
                 device: torch.device | str | None = None) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ConfigError(f"got dim={dim!r}.", field="dim", fix="pass an int >= 1.")
        self.ctx, self.dim, self.name = ctx, dim, name
        orig = torch.from_numpy(np.array(graph.part.orig_ids, dtype=np.int64))
        if types is not None:
            book = graph.meta.types
            if book is None:
                raise ConfigError("types= needs a typed partition.", field="types",
                                  fix="drop types=, or partition a typed graph.")
            bounds = book.part_bounds(graph.rank).tolist()
            orig = torch.cat([orig[bounds[t]:bounds[t + 1]] for t in sorted(types)])
        self.orig_ids = orig
        self.store = DistFeatureStore(graph, ctx, device=device, stats=stats, types=types,
                                      arrays={"weight": hashed_uniform(orig, dim, seed, scale)},
                                      kind="embedding")
        self.weight = self.store.array("weight")
        self._trace: list[tuple[Tensor, Tensor]] = []

    def __call__(self, gids: Tensor, owned_counts: list[int] | None = None,
                 block_sizes: list[int] | None = None) -> Tensor:
        """Rows of ``gids`` (collective); with autograd on, their gradients are kept.

        ``owned_counts`` / ``block_sizes``: a typed batch's own-first runs per hop
        (``batch[t].num_owned_nodes`` / ``.num_sampled_nodes``), as
        :meth:`~gnnpar.storage.features.DistFeatureStore.gather_many` takes them.
        """
        rows = self.store.gather_many(gids, ("weight",), owned_counts,
                                      block_sizes)["weight"]
        if torch.is_grad_enabled():
            rows.requires_grad_(True)
            self._trace.append((gids.to(rows.device), rows))
        return rows

    def take_grads(self) -> tuple[Tensor, Tensor]:
        """The ids and gradients of the rows returned since the last step (then forgotten)."""
        dev = self.weight.device
        used = [(g, r.grad) for g, r in self._trace if r.grad is not None]
        self._trace.clear()
        if not used:
            return (torch.zeros(0, dtype=torch.int64, device=dev),
                    torch.zeros((0, self.dim), device=dev))
        return torch.cat([g for g, _ in used]), torch.cat([grad for _, grad in used])


def _to_owners(emb: DistEmbedding, ids: Tensor, grads: Tensor) -> tuple[Tensor, Tensor]:
    """Send summed gradients to the rows' owners (collective); ``(held rows, gradients)``.

    Each rank sums its gradients per distinct id, then sends ``[grad | id]`` rows in one
    exchange; the owner sums each row's arrivals and divides by the world size.
    """
    ctx, g = emb.ctx, emb.store.graph
    dev = emb.weight.device
    uniq, inv = torch.unique(ids, return_inverse=True)
    summed = torch.zeros((uniq.numel(), emb.dim), dtype=torch.float32, device=dev)
    summed.index_add_(0, inv, grads.to(dev, torch.float32))
    owner = g.owner(uniq)
    order = torch.argsort(owner, stable=True)
    send_counts, recv_counts = exchange_counts(ctx, count(owner, ctx.world_size))
    packed = torch.cat([summed.index_select(0, order),
                        uniq.index_select(0, order)[:, None].view(torch.float32)], 1)
    got, _ = all_to_all_v(ctx, packed, send_counts, recv_counts, stats=emb.store.stats,
                          kind="embedding_grad")
    arrived = got[:, emb.dim:].contiguous().view(torch.int64).squeeze(1)
    rows, where = torch.unique(emb.store.rows_of(arrived), return_inverse=True)
    total = torch.zeros((rows.numel(), emb.dim), dtype=torch.float32, device=dev)
    total.index_add_(0, where, got[:, :emb.dim])
    return rows, total.div_(ctx.world_size)


class SparseOptimizer:
    """Updates the touched rows of :class:`DistEmbedding` tables (collective ``step``).

    Args:
        embeddings: The tables.
        lr: Learning rate.

    Attributes:
        steps: Steps taken (the bias corrections' step count).
    """

    state_names: tuple[str, ...] = ()

    def __init__(self, embeddings: Sequence[DistEmbedding], lr: float) -> None:
        if not isinstance(lr, (int, float)) or isinstance(lr, bool) or lr <= 0:
            raise ConfigError(f"got lr={lr!r}.", field="sparse_lr", fix="pass a rate > 0.")
        self.embeddings = list(embeddings)
        self.lr = float(lr)
        self.steps = 0
        self.state = [{n: torch.zeros_like(e.weight) for n in self.state_names}
                      for e in self.embeddings]

    def zero_grad(self) -> None:
        """Forget the rows gathered since the last step (local)."""
        for e in self.embeddings:
            e._trace.clear()

    @torch.no_grad()
    def step(self) -> None:
        """Send the gradients to the owners and update their touched rows (collective)."""
        self.steps += 1
        for emb, state in zip(self.embeddings, self.state, strict=True):
            rows, grad = _to_owners(emb, *emb.take_grads())
            if rows.numel():
                self._update(emb.weight, state, rows, grad)

    def _update(self, weight: Tensor, state: dict[str, Tensor], rows: Tensor,
                grad: Tensor) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The whole tables and state in dataset-id order, on rank 0 (collective)."""
        out: dict[str, Any] = {"steps": self.steps}
        for emb, state in zip(self.embeddings, self.state, strict=True):
            out[emb.name] = gather_state(emb, {"weight": emb.weight, **state})
        return out

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Restore this rank's rows and state from :meth:`state_dict` (local)."""
        self.steps = int(saved["steps"])
        for emb, state in zip(self.embeddings, self.state, strict=True):
            part = saved.get(emb.name)
            if not isinstance(part, dict) or "ids" not in part:
                raise ConfigError(f"the checkpoint holds no embedding {emb.name!r}.",
                                  field="embeddings", fix="resume with the same model "
                                  "arguments as the saved run.")
            ids = part["ids"]
            at = torch.searchsorted(ids, emb.orig_ids).clamp_(max=max(ids.numel() - 1, 0))
            if ids.numel() == 0 or not bool((ids[at] == emb.orig_ids).all()):
                raise ConfigError(f"embedding {emb.name!r} lacks rows of this graph.",
                                  field="embeddings", fix="resume on the same graph.")
            for name, dest in (("weight", emb.weight), *state.items()):
                dest.copy_(part[name].index_select(0, at).to(dest.device))


def gather_state(emb: DistEmbedding, tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """Every rank's rows of ``tensors`` on rank 0, sorted by dataset id (collective).

    One exchange per tensor, so rank 0 holds the gathered tables and one in flight.

    Returns:
        On rank 0, ``{"ids": [N_rows], name: [N_rows, dim], ...}``; elsewhere ``{}``.
    """
    ctx = emb.ctx
    dev = emb.weight.device
    n = emb.orig_ids.numel()
    send = [n if r == 0 else 0 for r in range(ctx.world_size)]
    recv = [int(v) for v in exchange_counts(ctx, torch.tensor(send, device=ctx.device))[1]]

    def to_main(rows: Tensor) -> Tensor:
        return all_to_all_v(ctx, rows.to(dev), send, recv)[0].cpu()

    ids = to_main(emb.orig_ids)
    order = torch.argsort(ids)
    out = {"ids": ids[order]} if ctx.is_main else {}
    for name, t in tensors.items():
        got = to_main(t)
        if ctx.is_main:
            out[name] = got.index_select(0, order)
    return out


class SparseAdam(SparseOptimizer):
    """``torch.optim.SparseAdam``'s update on the touched rows (lazy Adam).

    Args:
        embeddings: The tables.
        lr: Learning rate.
        betas: Decay rates of the first and second moments.
        eps: Added to the denominator.
    """

    state_names = ("exp_avg", "exp_avg_sq")

    def __init__(self, embeddings: Sequence[DistEmbedding], lr: float = 0.01,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        super().__init__(embeddings, lr)
        self.betas, self.eps = betas, eps

    def _update(self, weight: Tensor, state: dict[str, Tensor], rows: Tensor,
                grad: Tensor) -> None:
        beta1, beta2 = self.betas
        avg_old = state["exp_avg"].index_select(0, rows)
        sq_old = state["exp_avg_sq"].index_select(0, rows)
        avg_step = (grad - avg_old).mul_(1 - beta1)
        sq_step = (grad.pow(2) - sq_old).mul_(1 - beta2)
        state["exp_avg"].index_add_(0, rows, avg_step)
        state["exp_avg_sq"].index_add_(0, rows, sq_step)
        numer = avg_step.add_(avg_old)
        denom = sq_step.add_(sq_old).sqrt_().add_(self.eps)
        size = self.lr * math.sqrt(1 - beta2 ** self.steps) / (1 - beta1 ** self.steps)
        weight.index_add_(0, rows, numer.div_(denom).mul_(-size))


class SparseAdagrad(SparseOptimizer):
    """``torch.optim.Adagrad``'s update of a sparse gradient on the touched rows.

    Args:
        embeddings: The tables.
        lr: Learning rate.
        eps: Added to the denominator.
    """

    state_names = ("sum",)

    def __init__(self, embeddings: Sequence[DistEmbedding], lr: float = 0.01,
                 eps: float = 1e-10) -> None:
        super().__init__(embeddings, lr)
        self.eps = eps

    def _update(self, weight: Tensor, state: dict[str, Tensor], rows: Tensor,
                grad: Tensor) -> None:
        state["sum"].index_add_(0, rows, grad.pow(2))
        std = state["sum"].index_select(0, rows).sqrt_().add_(self.eps)
        weight.index_add_(0, rows, grad.div(std).mul_(-self.lr))


SPARSE_OPTIMIZERS: dict[str, type[SparseOptimizer]] = {"adam": SparseAdam,
                                                       "adagrad": SparseAdagrad}
"""The sparse optimisers by ``--sparse-optimizer`` name."""
