"""Tensor-parallel plans (Megatron column/row pairs) applied with DTensor.

A *plan* maps module names to torch's parallel styles, exactly what
:func:`torch.distributed.tensor.parallel.parallelize_module` takes.  A column-parallel
linear splits its output features over the ``tp`` ranks, so its output stays split; the
row-parallel linear after it splits its input features the same way and all-reduces its
output.  Between the two only element-wise operations may run (an activation, a dropout;
in attention, the per-head product), so one pair costs one all-reduce forward and one
backward.

Ready plans: :func:`mlp_plan` for an ``nn.Sequential`` MLP, :func:`transformer_block_plan`
for one :class:`~gnnpar.parallel.models.TransformerBlock`, :func:`transformer_lm_plan` for a
whole :class:`~gnnpar.parallel.models.TransformerLM` (vocabulary-split embedding and head).
:func:`sharded_dims` says which dimension of each parameter a style splits; the planner
uses it to count per-rank bytes without building a mesh.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

from gnnpar.errors import ConfigError
from gnnpar.parallel.models import TransformerLM

TensorParallelPlan = dict[str, ParallelStyle]
"""Module name (relative to the model) -> parallel style."""

ELEMENTWISE = (
    nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.ELU, nn.Dropout, nn.Identity,
)
"""Modules that may sit between a column- and a row-parallel linear (they act per feature)."""


def mlp_plan(model: nn.Sequential, prefix: str = "") -> TensorParallelPlan:
    """Column/row pairs for the linear layers of an ``nn.Sequential``.

    Linear layers are paired in order when only element-wise modules
    (:data:`ELEMENTWISE`) separate them; a linear left without a partner is
    column-parallel with its output gathered, so the next module sees full features.

    Args:
        model: The MLP.
        prefix: Name of ``model`` inside a larger model (``""`` for the model itself).

    Returns:
        The plan.
    """
    names = list(model._modules)
    plan: TensorParallelPlan = {}
    i = 0
    while i < len(names):
        if not isinstance(model._modules[names[i]], nn.Linear):
            i += 1
            continue
        j = i + 1
        while j < len(names) and isinstance(model._modules[names[j]], ELEMENTWISE):
            j += 1
        here = f"{prefix}{names[i]}"
        if j < len(names) and isinstance(model._modules[names[j]], nn.Linear):
            plan[here] = ColwiseParallel()
            plan[f"{prefix}{names[j]}"] = RowwiseParallel()
            i = j + 1
        else:
            plan[here] = ColwiseParallel(output_layouts=Replicate())
            i = j
    return plan


def transformer_block_plan(prefix: str) -> TensorParallelPlan:
    """Megatron plan of one transformer block: heads split, feed-forward hidden split.

    Args:
        prefix: Name of the block, e.g. ``"layers.0"``.

    Returns:
        ``wq``/``wk``/``wv``/``w1`` column-parallel, ``wo``/``w2`` row-parallel.
    """
    return {
        f"{prefix}.attention.wq": ColwiseParallel(),
        f"{prefix}.attention.wk": ColwiseParallel(),
        f"{prefix}.attention.wv": ColwiseParallel(),
        f"{prefix}.attention.wo": RowwiseParallel(),
        f"{prefix}.feed_forward.w1": ColwiseParallel(),
        f"{prefix}.feed_forward.w2": RowwiseParallel(),
    }


def transformer_lm_plan(model: TransformerLM, tp: int) -> TensorParallelPlan:
    """Plan of a whole :class:`TransformerLM` for ``tp`` ranks.

    The token embedding is split by vocabulary rows (output all-reduced), every block
    by :func:`transformer_block_plan`, the vocabulary head by columns (logits gathered);
    norms and the position table stay replicated.

    Args:
        model: The model (used for its sizes and layer names).
        tp: Tensor-parallel degree.

    Returns:
        The plan.

    Raises:
        ConfigError: If ``tp`` does not divide the number of heads or the widths.
    """
    cfg = model.cfg
    for field, value in (("n_heads", cfg.n_heads), ("ffn_dim", cfg.ffn_dim)):
        if value % tp != 0:
            raise ConfigError(
                f"tp={tp} does not divide {field}={value}: every tensor-parallel rank "
                "must hold the same number of heads and hidden units.",
                field=field,
                fix=f"use a tp that divides {field}, or a model with {field} divisible by {tp}.",
            )
    plan: TensorParallelPlan = {"embeddings.tok": RowwiseParallel(input_layouts=Replicate())}
    for key in model.layers:
        plan.update(transformer_block_plan(f"layers.{key}"))
    plan["output"] = ColwiseParallel(output_layouts=Replicate())
    return plan


def default_plan(model: nn.Module, tp: int) -> TensorParallelPlan:
    """The ready plan for a model gnnpar knows (MLP or :class:`TransformerLM`).

    Raises:
        ConfigError: For any other model (pass ``plan=`` yourself).
    """
    if isinstance(model, TransformerLM):
        return transformer_lm_plan(model, tp)
    if isinstance(model, nn.Sequential):
        return mlp_plan(model)
    raise ConfigError(
        f"no ready tensor-parallel plan for a {type(model).__name__}.",
        field="plan",
        fix="pass plan={module_name: ColwiseParallel() | RowwiseParallel(), ...}.",
    )


def apply_tensor_parallel(
    module: nn.Module, tp_mesh: DeviceMesh, plan: TensorParallelPlan
) -> nn.Module:
    """Shard the planned submodules of ``module`` over ``tp_mesh`` (in place).

    Entries naming modules that ``module`` does not hold (layers of another pipeline
    stage) are skipped.

    Args:
        module: The model or this rank's pipeline stage of it.
        tp_mesh: One-dimensional tensor-parallel mesh.
        plan: Module name -> style.

    Returns:
        ``module``, with DTensor parameters in the planned submodules.
    """
    present = dict(module.named_modules())
    local = {name: style for name, style in plan.items() if name in present}
    if tp_mesh.size() > 1 and local:
        parallelize_module(module, tp_mesh, local)
    return module


def check_plan(model: nn.Module, plan: TensorParallelPlan) -> None:
    """Raise if a plan names a module the model lacks or that the style cannot split.

    Raises:
        ConfigError: Naming the first bad entry.
    """
    modules = dict(model.named_modules())
    for name, style in plan.items():
        if name not in modules:
            raise ConfigError(
                f"the tensor-parallel plan names {name!r}, which {type(model).__name__} "
                "does not have.",
                field="plan",
                fix=f"use module names from model.named_modules(), e.g. {list(modules)[1:4]}.",
            )
        if isinstance(style, (ColwiseParallel, RowwiseParallel)) and not isinstance(
            modules[name], (nn.Linear, nn.Embedding)
        ):
            raise ConfigError(
                f"plan entry {name!r} is a {type(modules[name]).__name__}; column/row "
                "parallel styles split only nn.Linear and nn.Embedding.",
                field="plan",
                fix="plan the linear layers inside it instead.",
            )


def shard_size(n: int, parts: int, index: int) -> int:
    """Length of shard ``index`` of ``n`` elements split in ``parts`` (``torch.chunk`` sizes).

    DTensor ``Shard`` and FSDP2 both split this way: ``ceil(n / parts)`` per shard, the
    last ones shorter or empty.
    """
    size = -(-n // parts)
    return max(0, min(size, n - index * size))


def sharded_dims(module: nn.Module, style: ParallelStyle) -> dict[str, int | None]:
    """Which dimension of each direct parameter ``style`` splits (``None``: replicated).

    Follows torch's styles: column-parallel splits ``Linear.weight``/``bias`` on dim 0
    and ``Embedding.weight`` on dim 1; row-parallel splits ``Linear.weight`` on dim 1
    (bias replicated) and ``Embedding.weight`` on dim 0.

    Args:
        module: The planned module.
        style: Its style.

    Returns:
        Parameter name (``"weight"``, ``"bias"``) -> split dimension or ``None``.
    """
    names = [n for n, _ in module.named_parameters(recurse=False)]
    dims: dict[str, int | None] = dict.fromkeys(names)
    embedding = isinstance(module, nn.Embedding)
    if isinstance(style, ColwiseParallel):
        dims.update({n: (1 if embedding else 0) for n in names})
    elif isinstance(style, RowwiseParallel):
        dims["weight"] = 0 if embedding else 1
    return dims
