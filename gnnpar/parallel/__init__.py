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
