"""Tensor parallelism over the hidden dimension of a GNN, data parallelism across parts.

A GraphSAGE-style layer computes ``lin_l(aggregate(x)) + lin_r(x)``.  The aggregation
(sum, mean, max over neighbours) acts on each feature column separately, so it commutes
with splitting the columns of its input.  Layers therefore pair up exactly as Megatron
linears do:

- a **column** layer keeps its input whole and splits the output features of every
  linear inside it over the ``tp`` ranks: each rank aggregates the full input and
  produces ``hidden / tp`` output columns, no communication forward;
- a **row** layer takes those ``hidden / tp`` columns, aggregates them (column-wise, so
  locally), multiplies them by its rows of the weights and sums the partial results of
  all its linears with **one** all-reduce over the ``tp`` group.

Every linear is a DTensor shard applied by torch's ``ColwiseParallel`` /
``RowwiseParallel`` (the PyG ``Linear`` modules are first swapped for ``nn.Linear``
holding the same parameters).  Supported layers are those whose only parameters are in
linears applied after a per-column aggregation: :class:`~torch_geometric.nn.conv.SAGEConv`
(without ``project`` or ``normalize``) and :class:`~torch_geometric.nn.conv.GraphConv`.
Across the ``dp`` dimension each group trains on its own part's batch and FSDP2 (or
DDP when ``tp == 1``) averages the gradients, so a ``dp x tp`` run equals the unsplit
model trained on the same batches.  It needs only ``x, edge_index`` of a batch, whatever
produced it.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Partial, Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleOutput,
    RowwiseParallel,
)
from torch_geometric.nn import GraphConv, SAGEConv
from torch_geometric.nn.dense.linear import Linear as PygLinear

from gnnpar.errors import ConfigError
from gnnpar.parallel.config import ParallelConfig
from gnnpar.parallel.data_parallel import apply_ddp, apply_fsdp
from gnnpar.parallel.tensor_parallel import TensorParallelPlan, apply_tensor_parallel

SUPPORTED_CONVS = (SAGEConv, GraphConv)


def _check_conv(name: str, conv: nn.Module) -> None:
    if not isinstance(conv, SUPPORTED_CONVS):
        raise ConfigError(
            f"layer {name!r} is a {type(conv).__name__}; hidden-dimension tensor "
            "parallelism needs layers whose linears follow a per-column aggregation.",
            field="model",
            fix="use SAGEConv or GraphConv layers (e.g. torch_geometric.nn.GraphSAGE), "
            "or tp=1.",
        )
    if isinstance(conv, SAGEConv) and (conv.project or conv.normalize):
        raise ConfigError(
            f"layer {name!r} is a SAGEConv with project={conv.project}, "
            f"normalize={conv.normalize}, which mix feature columns outside its linears.",
            field="model",
            fix="build the SAGEConv with project=False, normalize=False, or use tp=1.",
        )


def conv_layers(model: nn.Module) -> list[str]:
    """Names of the message-passing layers of a PyG ``BasicGNN`` (``model.convs``).

    Raises:
        ConfigError: If the model has no ``convs`` list, or has normalisation layers or
            jumping knowledge (both mix feature columns).
    """
    convs = getattr(model, "convs", None)
    if not isinstance(convs, nn.ModuleList):
        raise ConfigError(
            f"a {type(model).__name__} has no `convs` ModuleList.",
            field="model",
            fix="use a torch_geometric.nn.models.BasicGNN (GraphSAGE, ...) or pass plan=.",
        )
    norms = getattr(model, "norms", None) or []
    if any(not isinstance(n, nn.Identity) for n in norms) or getattr(model, "jk", None):
        raise ConfigError(
            "normalisation layers and jumping knowledge mix the split hidden features.",
            field="model",
            fix="build the model with norm=None and jk=None for tensor parallelism.",
        )
    return [f"convs.{i}" for i in range(len(convs))]


def gnn_tensor_parallel_plan(model: nn.Module) -> TensorParallelPlan:
    """Column layer, row layer, column layer, ... over the hidden dimension.

    A last layer left column-parallel gathers its output, so the model output is whole.

    Args:
        model: A PyG ``BasicGNN`` of :data:`SUPPORTED_CONVS` layers.

    Returns:
        The plan, naming the linears inside each layer (and each row layer itself, to
        sum its partial outputs once).
    """
    modules = dict(model.named_modules())
    names = conv_layers(model)
    plan: TensorParallelPlan = {}
    for i, name in enumerate(names):
        conv = modules[name]
        _check_conv(name, conv)
        linears = [n for n, m in conv.named_children() if isinstance(m, (PygLinear, nn.Linear))]
        if i % 2 == 0:
            last = i == len(names) - 1
            for lin in linears:
                plan[f"{name}.{lin}"] = (
                    ColwiseParallel(output_layouts=Replicate()) if last else ColwiseParallel()
                )
        else:
            for lin in linears:
                plan[f"{name}.{lin}"] = RowwiseParallel(output_layouts=Partial())
            plan[name] = PrepareModuleOutput(
                output_layouts=Partial(), desired_output_layouts=Replicate()
            )
    return plan


def _swap_pyg_linears(model: nn.Module) -> None:
    """Replace PyG ``Linear`` modules by ``nn.Linear`` sharing the same parameters."""
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, PygLinear):
                continue
            if child.in_channels < 0:
                raise ConfigError(
                    f"{parent_name}.{name} is a lazy Linear (in_channels=-1).",
                    field="in_channels",
                    fix="give the layers their input width, or run one forward first.",
                )
            lin = nn.Linear(child.in_channels, child.out_channels, bias=child.bias is not None,
                            device="meta")
            lin.weight = child.weight
            lin.bias = child.bias
            setattr(parent, name, lin)


def parallelize_gnn(
    model: nn.Module,
    config: ParallelConfig,
    mesh: DeviceMesh,
    *,
    plan: TensorParallelPlan | None = None,
) -> nn.Module:
    """Tensor-parallel hidden layers inside each ``tp`` group, data parallel across them.

    Args:
        model: A PyG ``BasicGNN`` (e.g. ``GraphSAGE(..., norm=None, jk=None)``), built
            with the same weights on every rank; modified in place.
        config: Degrees with ``pp == 1``.
        mesh: The mesh of ``config.build_mesh()``.
        plan: Tensor-parallel plan; by default :func:`gnn_tensor_parallel_plan`.

    Returns:
        The module to train: call it as ``model(x, edge_index)`` on this rank's batch;
        its output is whole (replicated over ``tp``).

    Shapes:
        x ``[N, in]``, edge_index ``[2, E]``, output ``[N, out]``.
    """
    if config.pp != 1:
        raise ConfigError(
            f"a GNN is not cut into pipeline stages ({config.degrees()}).",
            field="pp",
            fix="use pp=1 with dp x tp ranks.",
        )
    config.validate(mesh.size())
    if config.tp > 1:
        plan = plan if plan is not None else gnn_tensor_parallel_plan(model)
        _swap_pyg_linears(model)
        apply_tensor_parallel(model, mesh["tp"], plan)
    if config.dp > 1:
        if config.dp_mode == "ddp":
            return apply_ddp(model, mesh["dp"])
        apply_fsdp(model, mesh["dp"], conv_layers(model))
    return model
