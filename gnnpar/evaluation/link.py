"""Link-prediction evaluation on the whole partitioned graph: embeddings, scores, metrics.

1. The encoder's embeddings of every owned node, by chunked layer-wise full-neighbour
   inference (:func:`~gnnpar.nn.inference.layerwise_inference`; one halo exchange per
   layer), so they equal the same PyG encoder on the whole graph.
2. A split's positives are stored with the part that owns their source, their fixed
   negatives with them (:mod:`gnnpar.partition.format`).  Positives are scored in chunks
   of ``chunk`` edges: the embeddings of a chunk's endpoints and candidates are gathered
   from their owners in one feature-store exchange (:class:`~gnnpar.storage.features.
   DistFeatureStore` over the embeddings), then the decoder scores the pairs.  Every rank
   takes as many chunks as the rank with the most (the exchanges are collective).
3. The metrics of all ranks' scores together, as ``ogb.linkproppred.Evaluator`` computes
   them (:mod:`gnnpar.evaluation.ranking`): per-edge candidates give MRR and Hits@K, shared
   negative pairs Hits@K.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpar.comm import CommStats, all_gather_ints
from gnnpar.distributed import DistContext
from gnnpar.evaluation.ranking import ranking_metrics, shared_negative_hits
from gnnpar.models.link import LinkDecoder
from gnnpar.nn.inference import layerwise_inference
from gnnpar.storage.features import DistFeatureStore
from gnnpar.storage.graph import DistGraph

KS = (1, 10, 50, 100)
"""Hits@K reported by default."""


def embeddings(gnn: BasicGNN, graph: DistGraph, ctx: DistContext, budget_bytes: int,
               stats: CommStats | None = None,
               dtype: torch.dtype = torch.float32) -> Tensor:
    """``[num_owned, C]`` full-neighbour embeddings of the owned nodes (collective)."""
    x = graph.features().to(ctx.device, dtype)
    return layerwise_inference(gnn, graph, ctx, x, budget_bytes, stats).float()


@torch.no_grad()
def split_scores(h: Tensor, decoder: LinkDecoder, graph: DistGraph, ctx: DistContext,
                 split: str, stats: CommStats | None = None,
                 chunk: int = 1024) -> tuple[Tensor, Tensor]:
    """Scores of this rank's positives of ``split`` and of their negatives (collective).

    Args:
        h: ``[num_owned, C]`` embeddings of the owned nodes.
        decoder: The pair scorer.
        graph: This rank's part.
        ctx: Distributed context.
        split: ``"val"`` or ``"test"``.
        stats: Byte counters (kind ``feature`` for the gathered embeddings).
        chunk: Positives (and shared negative pairs) scored per exchange.

    Returns:
        ``(pos [m], neg)``: ``neg`` is ``[m, C]`` for per-edge candidates, ``[m']`` for
        this rank's shared negative pairs.
    """
    part, dev = graph.part, ctx.device
    was_training = decoder.training
    decoder.eval()
    store = DistFeatureStore(graph, ctx, stats=stats, arrays={"h": h})
    pos = torch.from_numpy(np.array(getattr(part, f"{split}_edges"), dtype=np.int64))
    neg = torch.from_numpy(np.array(getattr(part, f"{split}_neg"), dtype=np.int64))
    per_edge = graph.meta.neg_kind == "per_edge"
    num_chunks = int(all_gather_ints(ctx, [-(-max(len(pos), len(neg)) // chunk)]).max())
    pos_scores, neg_scores = [], []
    for c in range(num_chunks):
        p = pos[c * chunk:(c + 1) * chunk].to(dev)
        q = neg[c * chunk:(c + 1) * chunk].to(dev)
        ids = torch.cat([p[:, 0], p[:, 1], q.reshape(-1)])
        rows = store.gather_many(ids, ("h",))["h"]
        hs, hd, hq = rows[:len(p)], rows[len(p):2 * len(p)], rows[2 * len(p):]
        pos_scores.append(decoder(hs, hd))
        if per_edge:
            k = q.shape[1]
            neg_scores.append(decoder(hs.repeat_interleave(k, 0), hq).view(len(p), k))
        else:
            hq = hq.view(len(q), 2, h.shape[1])  # a chunk may hold no negative pair
            neg_scores.append(decoder(hq[:, 0], hq[:, 1]))
    decoder.train(was_training)
    width = int(neg.shape[1]) if per_edge else 0
    empty = torch.zeros((0, width) if per_edge else (0,), device=dev)
    return (torch.cat(pos_scores) if pos_scores else torch.zeros(0, device=dev),
            torch.cat(neg_scores) if neg_scores else empty)


def link_metrics(h: Tensor, decoder: LinkDecoder, graph: DistGraph, ctx: DistContext,
                 splits: Sequence[str] = ("val", "test"), ks: Sequence[int] = KS,
                 stats: CommStats | None = None, chunk: int = 1024) -> dict[str, float]:
    """MRR (per-edge negatives) and Hits@K of each split over all ranks (collective).

    Returns:
        ``{"val_mrr", "val_hits@K", ..., "test_mrr", ...}`` (no ``mrr`` with shared
        negatives; NaN for a split without positives anywhere).
    """
    out: dict[str, float] = {}
    for split in splits:
        pos, neg = split_scores(h, decoder, graph, ctx, split, stats, chunk)
        if graph.meta.neg_kind == "per_edge":
            metrics = ranking_metrics(pos, neg, ctx, ks)
        else:
            metrics = shared_negative_hits(pos, neg, ctx, ks)
        out.update({f"{split}_{k}": v for k, v in metrics.items()})
    return out
