"""``TypedSAGE``: relation-wise GraphSAGE on typed batches, trimmed hop by hop.

The model ``to_hetero(GraphSAGE(...), metadata, aggr="sum")`` builds — one mean
``SAGEConv`` per relation, the relations into a node type summed — with two savings that
the typed batches' layout allows (``num_sampled_nodes_dict`` / ``num_sampled_edges_dict``,
as PyG's hierarchical ``trim_to_layer``): layer ``i`` of ``L`` computes only the rows of
the nodes within ``L - 1 - i`` hops of the seeds, from the edges into them, and only the
node types (and relations) that later layers read, so the last layer has the target
type's relations alone and every parameter takes part in every step (DDP needs no
``find_unused_parameters``).  The seeds' logits equal those of the ``to_hetero`` model
with the same weights on the whole batch.
"""

from __future__ import annotations

from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

from gnnpar.errors import ConfigError
from gnnpar.typed import EdgeType, TypedLayout, relation_key


class TypedSAGE(nn.Module):
    """GraphSAGE with one mean ``SAGEConv`` per relation, summed per destination type.

    Args:
        layout: The graph's types.
        in_channels: Input width of each node type (features or embeddings).
        hidden: Hidden width.
        out_channels: Output width (classes) of the target type.
        num_layers: Message-passing layers.
        dropout: Dropout after each hidden layer's activation.

    Attributes:
        relations: Per layer, the relations it computes (those whose destination type a
            later layer, or the output, reads).
        convs: Per layer, ``{"src__rel__dst": SAGEConv}``.
    """

    def __init__(self, layout: TypedLayout, in_channels: dict[str, int], hidden: int,
                 out_channels: int, num_layers: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.target = layout.target
        needed = {layout.target}
        relations: list[list[EdgeType]] = []
        for _ in range(num_layers):  # from the last layer back
            rels = [r for r in layout.edge_types if r[2] in needed]
            relations.insert(0, rels)
            needed = needed | {r[0] for r in rels}
        for i in range(1, num_layers):  # layer i reads what layer i - 1 computed
            made = {r[2] for r in relations[i - 1]}
            lacking = sorted({t for r in relations[i] for t in (r[0], r[2])} - made)
            if lacking:
                raise ConfigError(f"node type {lacking[0]!r} has no incoming relation, so no "
                                  f"layer after the first computes it.", field="model.layers",
                                  fix="add reverse relations (the OGB loader's add_reverse, "
                                  "PyG's ToUndirected), or --layers 1.")
        self.relations = relations
        self.convs = nn.ModuleList()
        for i, rels in enumerate(relations):
            width = out_channels if i == num_layers - 1 else hidden

            def dim(t: str, layer: int = i) -> int:
                return in_channels[t] if layer == 0 else hidden

            self.convs.append(nn.ModuleDict({
                relation_key(r): SAGEConv((dim(r[0]), dim(r[2])), width, aggr="mean")
                for r in rels}))
        self.act = nn.ReLU()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x_dict: dict[str, Tensor], edge_index_dict: dict[EdgeType, Tensor],
                num_sampled_nodes_dict: dict[str, list[int]],
                num_sampled_edges_dict: dict[EdgeType, list[int]]) -> Tensor:
        """Logits of the target type's seeds (its first ``num_sampled_nodes[0]`` rows).

        Args:
            x_dict: Input rows of every node type in batch order.
            edge_index_dict: Type-local edges of every relation, hop by hop.
            num_sampled_nodes_dict: Nodes of each type added per hop, seeds first.
            num_sampled_edges_dict: Edges of each relation sampled per hop.
        """
        return self.layer_outputs(x_dict, edge_index_dict, num_sampled_nodes_dict,
                                  num_sampled_edges_dict)[-1]

    def layer_outputs(self, x_dict: dict[str, Tensor],
                      edge_index_dict: dict[EdgeType, Tensor],
                      num_sampled_nodes_dict: dict[str, list[int]],
                      num_sampled_edges_dict: dict[EdgeType, list[int]]) -> list[Tensor]:
        """The target type's rows after each layer, seeds first (arguments as :meth:`forward`).

        Layer ``i`` (from 1) gives the rows of the target nodes within ``L - i`` hops of
        the seeds, after its activation and dropout (the last: the seeds' logits), as
        ``layerwise_inference``'s ``emit`` gives a homogeneous model's.
        """
        layers = len(self.convs)
        outputs = []
        for i, (convs, rels) in enumerate(zip(self.convs, self.relations, strict=True)):
            keep = layers - i  # nodes within layers - 1 - i hops: the first `keep` blocks
            out: dict[str, Tensor] = {}
            for r in rels:
                src, _, dst = r
                n_dst = sum(num_sampled_nodes_dict[dst][:keep])
                edges = edge_index_dict[r][:, :sum(num_sampled_edges_dict[r][:keep])]
                conv = convs[relation_key(r)]  # type: ignore[index]
                h = conv((x_dict[src], x_dict[dst][:n_dst]), edges)
                out[dst] = out[dst] + h if dst in out else h
            if i < layers - 1:
                out = {t: self.dropout(self.act(h)) for t, h in out.items()}
            x_dict = out
            outputs.append(out[self.target])
        return outputs
