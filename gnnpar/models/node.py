"""Node models: PyG's GraphSAGE, GCN and GAT, and how sampled batches and whole graphs run them.

The models are ``torch_geometric.nn.models`` :class:`~torch_geometric.nn.models.basic_gnn.BasicGNN`
models, unchanged; the same module runs in the two ways the trainer needs:

* on sampled minibatches through :class:`SampledGNN`, which calls the model's own layers
  (``convs``, ``norms``, ``act``, ``dropout``) hop by hop like PyG's ``trim_to_layer``,
  and in addition has each layer compute only the rows that later layers read: layer
  ``i`` of ``L`` outputs the nodes within ``L - 1 - i`` hops of the seeds, as DGL's
  message-flow graphs do.  (``BasicGNN.forward`` with ``num_sampled_nodes_per_hop``
  trims a layer's *input* only, so the first layer computes, activates and drops out
  rows for every sampled node — with fan-outs ``[15, 10]`` about ten times the rows
  needed.)  ``SAGEConv`` and ``GATConv`` run bipartite (sources: all input rows;
  targets: the first rows); ``GCNConv``, which has no bipartite form, runs on all input
  rows and is cut right after.  The outputs are those of ``BasicGNN.forward`` with
  ``trim_to_layer``, row for row;
* ``GCNConv`` with ``gcn_norm="global"`` (the default of ``gnnpar-train``) does not use
  the sampled subgraph's degrees, which are smaller than the graph's (a last-hop node has
  no in-edge in the subgraph at all) and differ between training and full-neighbour
  inference (PyG's behaviour, ``gcn_norm="sampled"``): each edge ``s -> d`` is weighted
  with the graph's degrees as full-graph GCN does, ``1 / sqrt(deg(s) deg(d))``, times
  ``in_degree(d) / sampled(d)`` (the in-edges of ``d`` over those sampled), which makes the
  sampled sum an unbiased estimate of the full one and equal to it wherever every in-edge
  was sampled; ``deg`` is PyG's ``add_remaining_self_loops`` degree, in-edges other than
  self-loops plus one.  The batch then carries the graph's ``in_degree`` and
  ``self_loops`` of its nodes;
* on the whole partitioned graph, after ``gnnpar.nn.dist_conv.distribute_convs`` has wrapped each
  message-passing layer in a halo-exchange ``DistConv``, for exact full-neighbour
  inference (``model(x, edge_index)``).
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from torch_geometric import EdgeIndex
from torch_geometric.data import Data
from torch_geometric.nn import GATConv, GCNConv, SAGEConv
from torch_geometric.nn.models import GAT, GCN, GraphSAGE
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpar.errors import ConfigError
from gnnpar.nn.dropout import Dropout, act_dropout
from gnnpar.nn.sage import is_mean_sage, sage_adjacency, sage_mean
from gnnpar.nn.sparse import SparseAdjacency
from gnnpar.ops import count


class ModelSpec(Protocol):
    """What :func:`build_model` reads of a model's settings (the run's ``--model ...``)."""

    @property
    def name(self) -> str: ...  # noqa: D102
    @property
    def hidden(self) -> int: ...  # noqa: D102
    @property
    def layers(self) -> int: ...  # noqa: D102
    @property
    def dropout(self) -> float: ...  # noqa: D102
    @property
    def heads(self) -> int: ...  # noqa: D102


MODELS: dict[str, type[BasicGNN]] = {"sage": GraphSAGE, "gcn": GCN, "gat": GAT}
_BIPARTITE = (SAGEConv, GATConv)


def build_model(cfg: ModelSpec, in_channels: int, out_channels: int) -> BasicGNN:
    """The PyG model named by ``cfg`` (initialised from torch's global generator).

    Args:
        cfg: Model section of the configuration.
        in_channels: Feature width.
        out_channels: Number of classes.

    Returns:
        A ``GraphSAGE`` (mean aggregation), ``GCN`` or ``GAT`` (``cfg.heads`` heads,
        concatenated in hidden layers) with ``cfg.layers`` message-passing layers.
    """
    if cfg.name not in MODELS:
        raise ConfigError(f"unknown model {cfg.name!r}.", field="model.name",
                          fix=f"pass --model with one of {', '.join(MODELS)}.")
    kwargs: dict[str, Any] = {"heads": cfg.heads} if cfg.name == "gat" else {}
    model = MODELS[cfg.name](in_channels, cfg.hidden, cfg.layers, out_channels,
                             dropout=cfg.dropout, **kwargs)
    model.dropout = Dropout(cfg.dropout)  # torch's, with a mask a quarter of the cost
    return model


class SampledGNN(nn.Module):
    """A :class:`BasicGNN` run on sampled batches, each layer trimmed to what is read next.

    It holds no parameters of its own (the state dict is the model's under ``gnn.``), so
    wrapping it in ``DistributedDataParallel`` synchronises the model's gradients.

    Args:
        gnn: A model from :func:`build_model` (no jumping knowledge, norms without batch
            arguments, activation after the norm).
        gcn_norm: ``"global"`` or ``"sampled"`` normalisation of ``GCNConv`` layers (see
            the module docstring).
    """

    def __init__(self, gnn: BasicGNN, gcn_norm: str = "global") -> None:
        super().__init__()
        if gnn.jk_mode is not None or gnn.supports_norm_batch or gnn.act_first:
            raise ConfigError("SampledGNN runs models without jumping knowledge, batch-wise "
                              "norms or act_first.", field="gnn",
                              fix="build the model with gnnpar.models.node.build_model.")
        if gcn_norm not in ("global", "sampled"):
            raise ConfigError(f"unknown gcn_norm {gcn_norm!r}.", field="gcn_norm",
                              fix="pass 'global' or 'sampled'.")
        for conv in gnn.convs:
            if gcn_norm == "global" and isinstance(conv, GCNConv) and (
                    conv.improved or not conv.normalize or not conv.add_self_loops):
                raise ConfigError("global GCN normalisation needs GCNConv(normalize=True, "
                                  "add_self_loops=True, improved=False).", field="gcn_norm",
                                  fix="pass gcn_norm='sampled' for other GCNConv settings.")
        self.gnn = gnn
        self.gcn_norm = gcn_norm

    @property
    def needs_degrees(self) -> bool:
        """Whether batches must carry ``in_degree`` and ``self_loops`` (global GCN)."""
        return self.gcn_norm == "global" and any(isinstance(c, GCNConv) for c in self.gnn.convs)

    def forward(self, x: Tensor, edge_index: Tensor, num_sampled_nodes: list[int],
                num_sampled_edges: list[int], in_degree: Tensor | None = None,
                self_loops: Tensor | None = None) -> Tensor:
        """Logits of the seeds of a batch laid out like PyG's ``NeighborLoader`` output.

        Args:
            x: ``[N, F]`` features: seeds first, then the nodes of each hop.
            edge_index: ``[2, E]`` batch-local edges, hop by hop.
            num_sampled_nodes: ``[L + 1]`` nodes per hop (seeds first).
            num_sampled_edges: ``[L]`` edges per hop.
            in_degree: ``[N]`` the graph's in-degree of each node (global GCN only).
            self_loops: ``[N]`` the graph's self-loops of each node (global GCN only).

        Returns:
            ``[num_sampled_nodes[0], C]`` logits of the seeds.
        """
        gnn = self.gnn
        layers = gnn.num_layers
        if isinstance(edge_index, EdgeIndex):  # plain tensor ops below, no subclass dispatch
            # .to: a no-op, except that the device shadow sees the plain tensor's device.
            edge_index = edge_index.as_tensor().to(x.device)
        for i, (conv, norm) in enumerate(zip(gnn.convs, gnn.norms, strict=True)):
            n_dst = sum(num_sampled_nodes[: layers - i])  # within layers-1-i hops
            edges = edge_index[:, : sum(num_sampled_edges[: layers - i])]  # into them
            if is_mean_sage(conv):
                x = sage_mean(conv, x, sage_adjacency(edges, n_dst, x.size(0), x.dtype))
            elif isinstance(conv, GATConv) and conv.add_self_loops:
                x = gat_with_loops(conv, x, edges, n_dst)
            elif isinstance(conv, _BIPARTITE):
                x = conv((x, x[:n_dst]), edges)
            elif isinstance(conv, GCNConv) and self.gcn_norm == "global":
                if in_degree is None or self_loops is None:
                    raise ConfigError("global GCN normalisation needs the batch's in_degree "
                                      "and self_loops.", field="in_degree",
                                      fix="load batches with node_attrs including "
                                      "'in_degree' and 'self_loops'.")
                x = global_gcn(conv, x, edges, n_dst, in_degree, self_loops)
            else:
                x = conv(x, edges)[:n_dst]
            if i < layers - 1:
                x = act_dropout(gnn.act, gnn.dropout, norm(x))
        return x


def gat_with_loops(conv: GATConv, x: Tensor, edge_index: Tensor, n_dst: int) -> Tensor:
    """``conv((x, x[:n_dst]), edge_index)`` with PyG's self-loops, and no host read.

    ``GATConv`` removes the self-loops of its input and adds one per destination: the
    removal compacts the edge list to a size known only on the device.  Here each
    sampled self-loop is sent to a spare destination row instead (then dropped), and
    the one loop per destination is appended: the same edges reach every destination.

    Shapes:
        x: ``[N, F]``; edge_index: ``[2, E]`` into ``[0, n_dst)``; returns ``[n_dst, F_out]``.
    """
    src, dst = edge_index[0], edge_index[1]
    loops = torch.arange(n_dst, device=x.device)
    dst = torch.where(src == dst, n_dst, dst)
    edges = torch.stack([torch.cat([src, loops]), torch.cat([dst, loops])])
    x_dst = torch.cat([x[:n_dst], x.new_zeros((1, *x.shape[1:]))])
    conv.add_self_loops = False
    try:
        out: Tensor = conv((x, x_dst), edges)
    finally:
        conv.add_self_loops = True
    return out[:n_dst]


def global_gcn(conv: GCNConv, x: Tensor, edge_index: Tensor, n_dst: int,
               in_degree: Tensor, self_loops: Tensor) -> Tensor:
    """``conv`` on sampled edges with the graph's degrees (see the module docstring).

    Args:
        conv: A normalising ``GCNConv`` with self-loops.
        x: ``[N, F]`` input rows of the batch's nodes.
        edge_index: ``[2, E]`` sampled edges (source, destination), destinations sorted,
            in ``[0, n_dst)``, every sampled in-edge of each destination included.
        n_dst: Rows to compute.
        in_degree: ``[N]`` in-degree of each node in the whole graph.
        self_loops: ``[N]`` self-loops of each node in the whole graph.

    Returns:
        ``[n_dst, F_out]``: exactly the full-graph ``GCNConv`` rows of the destinations
        whose in-edges were all sampled; an unbiased estimate of them otherwise.
    """
    h = conv.lin(x)
    src, dst = edge_index[0], edge_index[1]
    inv = (in_degree - self_loops + 1).to(h.dtype).rsqrt()  # PyG's add_remaining_self_loops
    sampled = count(dst, n_dst).clamp_(min=1)
    scale = in_degree[:n_dst].to(h.dtype) / sampled
    # Self-loops are replaced by the one of the normalisation: weight 0 (no compaction,
    # whose size would have to be read on the host).
    weight = inv.index_select(0, src) * inv.index_select(0, dst) * scale.index_select(0, dst)
    weight = weight * (src != dst)
    neighbours = SparseAdjacency(src, dst, weight, n_dst, h.size(0)) @ h
    out = h[:n_dst] * inv[:n_dst].square().unsqueeze(-1) + neighbours
    bias: Tensor | None = conv.bias
    result: Tensor = out + bias if bias is not None else out
    return result


COMPUTE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
"""The dtype of the model's input and activations for each ``--precision``."""


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """bfloat16 autocast for precision ``bf16`` (disabled for ``fp32``): wrap forwards."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""``/proc/cpuinfo`` flags of a CPU that multiplies bfloat16 matrices natively."""


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bfloat16 matrix products natively.

    A CUDA device that supports bf16 (compute capability 8.0 on), or a CPU with
    AVX512-BF16 or AMX and oneDNN (``torch.backends.mkldnn``).  Elsewhere (an AVX2 CPU)
    torch emulates bf16 products, several times slower than fp32.
    """
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        mkldnn = bool(torch.backends.mkldnn.is_available())  # type: ignore[no-untyped-call]
        return mkldnn and bool(_cpu_flags().intersection(CPU_BF16_FLAGS))
    return False


def sampled_precision(precision: str, device: torch.device) -> str:
    """The precision a sampled model computes in for ``--precision`` on ``device``.

    ``bf16`` where the device computes it natively (:func:`native_bf16`: autocast);
    elsewhere ``fp32``: bf16 then only halves the bytes of the stored and exchanged
    features, which are cast to fp32 once they arrive (the issue measured bf16 compute
    on an AVX2 CPU at 4x the fp32 forward).
    """
    return precision if precision != "bf16" or native_bf16(device) else "fp32"


def forward_batch(model: nn.Module, batch: Data, precision: str = "fp32",
                  x: Tensor | None = None) -> Tensor:
    """Logits ``[batch_size, C]`` of a minibatch's seeds (call under :func:`autocast`).

    Args:
        model: A :class:`SampledGNN`, possibly wrapped in ``DistributedDataParallel``.
        batch: A ``DistNeighborLoader`` batch (with ``in_degree`` and ``self_loops`` for
            global GCN); its features in any floating dtype (as stored).
        precision: ``fp32`` or ``bf16``: the features are cast to its compute dtype.
        x: Input rows in place of ``batch.x`` (learnable embeddings).
    """
    x = (batch.x if x is None else x).to(COMPUTE_DTYPES[precision])
    out: Tensor = model(x, batch.edge_index, batch.num_sampled_nodes,
                        batch.num_sampled_edges, batch.get("in_degree"),
                        batch.get("self_loops"))
    return out[: batch.batch_size]
