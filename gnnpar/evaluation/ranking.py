"""OGB link-prediction ranking metrics over the positives of every rank.

Two protocols, as ``ogb.linkproppred.Evaluator`` computes them:

- :func:`ranking_metrics` — each positive has its own negatives (ogbl-citation2,
  ogbl-wikikg2: ``eval_metric == "mrr"``).  A positive's rank is
  ``1 + (#neg > pos + #neg >= pos) / 2``, the mean of the optimistic and the pessimistic
  rank, so ties count half; MRR is the mean of ``1 / rank`` and Hits@K the fraction of
  ranks ``<= K``.  Each rank sums its reciprocal ranks and hits and counts its positives;
  one all-reduce of those ``len(ks) + 2`` numbers gives the global means.
- :func:`shared_negative_hits` — one negative set shared by all positives (ogbl-collab,
  ogbl-ppa, ogbl-ddi: ``eval_metric == "hits@K"``).  A positive hits if its score is
  strictly above the ``K``-th highest negative score; with fewer than ``K`` negatives in
  all, Hits@K is 1.  The negatives may be spread over the ranks (each held by one): an
  all-gather of every rank's ``max(ks)`` highest negatives and its negative count gives
  the global ``K``-th score, and an all-reduce sums the hits and positives.

Scores are compared in their own dtype, as OGB does; sums are float64, so a metric
equals OGB's single-process value up to float32 rounding of OGB's ``1 / rank``.  With no
positive on any rank a metric is NaN.  Every function is collective when ``ctx`` is
given (all ranks call it, a rank without positives passes empty tensors); the result is
read back to the host once.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from gnnpar.comm import all_gather_rows, all_reduce_sum
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError


def _check_ks(ks: Sequence[int]) -> None:
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
        raise ConfigError(f"got ks={ks!r}; need a non-empty list of ints >= 1.", field="ks",
                          fix="pass e.g. ks=(10, 50, 100).")


def _means(ctx: DistContext | None, sums: Tensor, names: list[str]) -> dict[str, float]:
    """``{name: total / count}`` of ``sums = [*totals, count]`` summed over the ranks."""
    if ctx is not None:
        sums = all_reduce_sum(ctx, sums.to(ctx.device))
    *totals, n = sums.tolist()
    return {k: v / n if n else float("nan") for k, v in zip(names, totals, strict=True)}


def ranking_metrics(pos_score: Tensor, neg_score: Tensor, ctx: DistContext | None = None,
                    ks: Sequence[int] = (10, 50, 100)) -> dict[str, float]:
    """MRR and Hits@K of positives ranked against their own negatives (one all-reduce).

    Equals ``Evaluator("ogbl-citation2").eval(...)``'s ``mrr_list`` / ``hits@K_list``
    averaged over the positives of all ranks together.

    Args:
        pos_score: ``[B]`` this rank's positive scores.
        neg_score: ``[B, K]`` the scores of each positive's negatives.
        ctx: Distributed context (``None``: this process's scores only).
        ks: The ``K`` of each Hits@K.

    Returns:
        ``{"mrr": ..., "hits@K": ...}`` over all ranks' positives.
    """
    _check_ks(ks)
    if neg_score.dim() != 2 or neg_score.shape[0] != pos_score.numel():
        raise ConfigError(f"got shape {list(neg_score.shape)}; need [{pos_score.numel()}, K], "
                          "K negatives per positive.", field="neg_score",
                          fix="pass one row of negative scores per positive.")
    pos = pos_score.reshape(-1, 1).to(neg_score.device)
    rank = 1 + 0.5 * ((neg_score > pos).sum(1) + (neg_score >= pos).sum(1)).double()
    count = torch.full((), float(rank.numel()), dtype=torch.float64, device=rank.device)
    sums = torch.stack([(1 / rank).sum(), *[(rank <= k).sum().double() for k in ks], count])
    return _means(ctx, sums, ["mrr", *[f"hits@{k}" for k in ks]])


def shared_negative_hits(pos_score: Tensor, neg_score: Tensor, ctx: DistContext | None = None,
                         ks: Sequence[int] = (10, 50, 100)) -> dict[str, float]:
    """Hits@K of positives against one negative set spread over the ranks (2 collectives).

    Equals ``Evaluator("ogbl-collab").eval(...)["hits@K"]`` (with ``Evaluator.K = K``)
    on all ranks' positives and negatives together.

    Args:
        pos_score: ``[B]`` this rank's positive scores.
        neg_score: ``[M]`` this rank's share of the shared negatives' scores (every
            negative on exactly one rank).
        ctx: Distributed context (``None``: this process's scores only).
        ks: The ``K`` of each Hits@K.

    Returns:
        ``{"hits@K": ...}`` over all ranks' positives.
    """
    _check_ks(ks)
    dev = neg_score.device if ctx is None else ctx.device
    top = max(ks)
    neg = neg_score.reshape(-1).to(dev, torch.float64)
    best = torch.full((top + 1,), float("-inf"), dtype=torch.float64, device=dev)
    best[:min(top, neg.numel())] = torch.topk(neg, min(top, neg.numel())).values
    best[top] = neg.numel()  # the count rides along as the last entry
    if ctx is not None and ctx.world_size > 1:
        rows = all_gather_rows(ctx, best)
        num_neg = rows[:, top].sum()
        best = torch.topk(rows[:, :top].reshape(-1), top).values
    else:
        num_neg, best = best[top], best[:top]
    pos = pos_score.reshape(-1).to(dev, torch.float64)
    hits = [torch.where(num_neg < k, float(pos.numel()), (pos > best[k - 1]).sum().double())
            for k in ks]
    count = torch.full((), float(pos.numel()), dtype=torch.float64, device=dev)
    return _means(ctx, torch.stack([*hits, count]), [f"hits@{k}" for k in ks])
