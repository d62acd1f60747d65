"""Data, tensor and pipeline parallelism for DNNs on one device mesh.

Built from torch's own pieces — FSDP2 ``fully_shard`` / DDP, DTensor
``parallelize_module`` and ``torch.distributed.pipelining`` — composed on one
``(pp, dp, tp)`` :class:`~torch.distributed.device_mesh.DeviceMesh`, on NCCL or gloo::

    ctx = gnnpar.distributed.init()
    config = ParallelConfig(dp=2, tp=2, pp=1)
    mesh = config.build_mesh(ctx.device.type)
    model = parallelize(TransformerLM(TransformerConfig()), config, mesh, loss_fn=lm_loss)
    opt = torch.optim.AdamW(model.parameters())
    loss = model.step(shard_batch(x, mesh["dp"]), shard_batch(y, mesh["dp"]))
    opt.step()

:func:`plan` proposes a layout for a memory budget.  GNNs split their feature and hidden
dimensions and their weights on the 3D grid of :mod:`gnnpar.nn.grid` instead
(``gnnpar-train --mode full --grid X,Y,Z``).
"""

from gnnpar.cost import HardwareModel
from gnnpar.parallel.config import ParallelConfig
from gnnpar.parallel.data_parallel import apply_ddp, apply_fsdp, shard_batch
from gnnpar.parallel.measure import (
    CollectiveCounter,
    gradient_bytes,
    optimizer_state_bytes,
    parameter_bytes,
)
from gnnpar.parallel.models import TransformerConfig, TransformerLM, lm_loss, mlp
from gnnpar.parallel.parallelize import ParallelModel, parallelize
from gnnpar.parallel.pipeline_parallel import build_schedule, pipeline_units, split_units
from gnnpar.parallel.planner import LayoutEstimate, Plan, Rejection, estimate, plan
from gnnpar.parallel.profile import ModelProfile, profile_model
from gnnpar.parallel.tensor_parallel import (
    apply_tensor_parallel,
    default_plan,
    mlp_plan,
    transformer_block_plan,
    transformer_lm_plan,
)

__all__ = [
    "CollectiveCounter",
    "HardwareModel",
    "LayoutEstimate",
    "ModelProfile",
    "ParallelConfig",
    "ParallelModel",
    "Plan",
    "Rejection",
    "TransformerConfig",
    "TransformerLM",
    "apply_ddp",
    "apply_fsdp",
    "apply_tensor_parallel",
    "build_schedule",
    "default_plan",
    "estimate",
    "gradient_bytes",
    "lm_loss",
    "mlp",
    "mlp_plan",
    "optimizer_state_bytes",
    "parallelize",
    "parameter_bytes",
    "pipeline_units",
    "plan",
    "profile_model",
    "shard_batch",
    "split_units",
    "transformer_block_plan",
    "transformer_lm_plan",
]
