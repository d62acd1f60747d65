"""Link predictors: a PyG encoder and a decoder that scores pairs of node embeddings.

The encoder is a :func:`~gnnpar.models.node.build_model` GNN whose output width is the
embedding width; on a sampled link batch it runs as :class:`~gnnpar.models.node.SampledGNN`
(embeddings of the batch's seed nodes, i.e. every endpoint of its pairs), on the whole
partitioned graph as layer-wise inference (:mod:`gnnpar.evaluation.link`).  The decoder
scores a pair from its two embeddings, as the OGB link baselines do:

- ``dot``: ``<h_s, h_d>``;
- ``mlp``: an MLP (``layers`` linear layers, ReLU and dropout between) on ``h_s * h_d``.

Scores are logits: ``binary_cross_entropy_with_logits`` against the batch's
``edge_label`` trains them, and ranking needs no sigmoid.
"""

from __future__ import annotations

from torch import Tensor, nn

from gnnpar.errors import ConfigError

DECODERS = ("dot", "mlp")


class LinkDecoder(nn.Module):
    """Score pairs of embeddings (see the module docstring).

    Args:
        kind: ``"dot"`` or ``"mlp"``.
        channels: Embedding width.
        layers: Linear layers of the MLP (``>= 1``).
        dropout: Dropout between the MLP's layers.
    """

    def __init__(self, kind: str, channels: int, layers: int = 2, dropout: float = 0.0) -> None:
        super().__init__()
        if kind not in DECODERS:
            raise ConfigError(f"unknown decoder {kind!r}.", field="link.decoder",
                              fix=f"pass --decoder with one of {', '.join(DECODERS)}.")
        self.kind = kind
        mods: list[nn.Module] = []
        if kind == "mlp":
            for i in range(layers):
                mods.append(nn.Linear(channels, 1 if i == layers - 1 else channels))
                if i < layers - 1:
                    mods += [nn.ReLU(), nn.Dropout(dropout)]
        self.mlp = nn.Sequential(*mods)

    def forward(self, h_src: Tensor, h_dst: Tensor) -> Tensor:
        """``[n]`` scores (logits) of ``n`` pairs of ``[n, C]`` embeddings."""
        if self.kind == "dot":
            return (h_src * h_dst).sum(-1)
        out: Tensor = self.mlp(h_src * h_dst).squeeze(-1)
        return out


class LinkPredictor(nn.Module):
    """An encoder run on sampled batches and a decoder; what DDP wraps in link training.

    Args:
        encoder: The sampled encoder (:class:`~gnnpar.models.node.SampledGNN`).
        decoder: The pair scorer.
    """

    def __init__(self, encoder: nn.Module, decoder: LinkDecoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(self, x: Tensor, edge_index: Tensor, num_sampled_nodes: list[int],
                num_sampled_edges: list[int], src: Tensor, dst: Tensor,
                in_degree: Tensor | None = None, self_loops: Tensor | None = None) -> Tensor:
        """Scores of the pairs ``(src[i], dst[i])`` (batch-local ids of seed nodes).

        ``in_degree`` and ``self_loops``: the batch's, for an encoder with global GCN
        normalisation.
        """
        h = self.encoder(x, edge_index, num_sampled_nodes, num_sampled_edges,
                         in_degree=in_degree, self_loops=self_loops)
        return self.score_all(h, src, dst)

    def score_all(self, h: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        """Scores of pairs of rows of ``h`` (e.g. full-neighbour embeddings)."""
        out: Tensor = self.decoder(h.index_select(0, src), h.index_select(0, dst))
        return out


def bce_sum(score: Tensor, label: Tensor) -> Tensor:
    """Summed binary cross-entropy of logits against 0/1 labels (in float32)."""
    return nn.functional.binary_cross_entropy_with_logits(score.float(), label.float(),
                                                          reduction="sum")
