"""Train an MLP or a small Transformer LM with data x tensor x pipeline parallelism.

    torchrun --standalone --nproc-per-node 4 examples/dnn_hybrid_parallel.py --dp 2 --tp 2

Any ``dp * tp * pp`` equal to the number of processes works (``--dp 1 --tp 2 --pp 2``,
``--dp 4``, ...); ``--plan`` lets :func:`gnnpar.parallel.planner.plan` choose the layout for a
memory budget instead.  Without torchrun it runs on one process.  The data are synthetic
and learnable: the MLP regresses a fixed random teacher network, the LM reads sequences
``t[i+1] = (5 * t[i] + 3) mod vocab`` from random starts.  The device is picked like
everywhere in gnnpar (the local rank's GPU when there is one, else the CPU; ``--device``).

The flags come from the nested configuration below (:mod:`gnnpar.config`: one flag per
field, ``--config FILE`` for TOML/JSON) and the run writes the same run record as
``gnnpar-train`` (``OUT/record.json``, one entry per step: loss, step time, bytes by
collective; default ``OUT``: a new ``runs/dnn-MODEL[-N]``).  Rank 0 also prints each
step, then each rank's memory (parameters, gradients, optimiser state, peak RSS).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from gnnpar.artifacts.kinds import RECORD_FILE
from gnnpar.comm import CommStats, all_gather_ints, broadcast_text, comm_totals, per_rank
from gnnpar.config import ArgumentParser, add_config_arguments, option, parse_config, to_dict
from gnnpar.distributed import init, shutdown
from gnnpar.parallel.config import ParallelConfig
from gnnpar.parallel.data_parallel import shard_batch
from gnnpar.parallel.measure import (
    CollectiveCounter,
    gradient_bytes,
    optimizer_state_bytes,
    parameter_bytes,
)
from gnnpar.parallel.models import TransformerConfig, TransformerLM, lm_loss, mlp
from gnnpar.parallel.parallelize import parallelize
from gnnpar.parallel.planner import plan
from gnnpar.sizes import peak_rss_bytes
from gnnpar.train.record import RunRecord
from gnnpar.train.rundir import prepare_run_dir

# FSDP2 warns about in-place ops on view outputs; these models do none.
warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")


@dataclass
class Layout:
    """How the model is split over the processes."""

    dp: int | None = None
    """Data-parallel degree (default: the processes that tp x pp leave)."""

    tp: int = 1
    """Tensor-parallel degree."""

    pp: int = 1
    """Pipeline-parallel degree."""

    dp_mode: str = "fsdp"
    """fsdp (sharded parameters) or ddp (replicated)."""

    schedule: str = "1f1b"
    """Pipeline schedule: 1f1b or gpipe."""

    microbatches: int | None = None
    """Pipeline micro-batches (default: pp)."""

    plan: bool = False
    """Let the planner pick the layout for --memory-budget-mb instead."""

    memory_budget_mb: float = 64.0
    """Per-rank memory budget of --plan, in MiB."""


@dataclass
class Model:
    """The model."""

    kind: str = option("transformer", flag="model")
    """mlp or transformer."""


@dataclass
class Train:
    """The optimisation."""

    steps: int = 10
    """Optimizer steps."""

    batch_size: int = 32
    """Global batch size."""

    lr: float = 3e-3
    """AdamW learning rate."""


@dataclass
class Run:
    """Where the run goes."""

    out: str | None = None
    """Run directory: record.json (default: a new runs/dnn-MODEL[-N])."""

    overwrite: bool = False
    """Replace the run in --out."""

    device: str | None = None
    """cpu or cuda (default: the local rank's GPU when torch sees one, else cpu)."""


@dataclass
class DnnConfig:
    """A whole run."""

    parallel: Layout = field(default_factory=Layout)
    """The layout."""

    model: Model = field(default_factory=Model)
    """The model."""

    train: Train = field(default_factory=Train)
    """The optimisation."""

    run: Run = field(default_factory=Run)
    """The run directory and device."""


parser = ArgumentParser(description=__doc__.splitlines()[0])
add_config_arguments(parser, DnnConfig)
cfg, _, _ = parse_config(parser, DnnConfig)
kind, t = cfg.model.kind, cfg.train
if kind not in ("mlp", "transformer"):
    parser.error(f"--model {kind}: choose mlp or transformer")

ctx = init(device=cfg.run.device)
log = print if ctx.is_main else (lambda *a, **k: None)
out = broadcast_text(ctx, str(prepare_run_dir(cfg.run.out, name=f"dnn-{kind}",
                                              overwrite=cfg.run.overwrite))
                     if ctx.is_main else "")
torch.manual_seed(0)  # the same initial weights on every rank


def build():
    """Model, batch generator (the same global batch on every rank) and loss."""
    if kind == "mlp":
        teacher = mlp([64, 32, 16])
        for p in teacher.parameters():
            p.requires_grad_(False)

        def batch(step: int):
            x = torch.randn(t.batch_size, 64, generator=torch.Generator().manual_seed(step))
            return x, teacher(x)

        return mlp([64, 512, 512, 512, 16]), batch, F.mse_loss
    lm = TransformerConfig(vocab_size=512, dim=128, n_heads=8, n_layers=4, ffn_dim=512,
                           max_seq_len=64)

    def batch(step: int):
        g = torch.Generator().manual_seed(step)
        seq = [torch.randint(0, lm.vocab_size, (t.batch_size,), generator=g)]
        for _ in range(lm.max_seq_len):
            seq.append((5 * seq[-1] + 3) % lm.vocab_size)
        tokens = torch.stack(seq, dim=1)
        return tokens[:, :-1], tokens[:, 1:]

    return TransformerLM(lm), batch, lm_loss


model, batch, loss_fn = build()
model = model.to(ctx.device)
lay = cfg.parallel
if lay.plan:
    proposal = plan(model, ctx.world_size, int(lay.memory_budget_mb * 2**20),
                    batch(0)[0].to(ctx.device))
    layout = proposal.best.config
    log(f"[{kind}] planner: {layout.degrees()}, estimated "
        f"{proposal.best.peak_bytes / 2**20:.1f} MiB/rank, "
        f"{len(proposal.rejected)} layouts rejected")
else:
    layout = ParallelConfig(
        dp=lay.dp if lay.dp is not None else ctx.world_size // (lay.tp * lay.pp),
        tp=lay.tp, pp=lay.pp, dp_mode=lay.dp_mode, schedule=lay.schedule,
        n_microbatches=lay.microbatches)
layout.validate(ctx.world_size, t.batch_size)
mesh = layout.build_mesh(ctx.device.type)
n_params = sum(p.numel() for p in model.parameters())
pm = parallelize(model, layout, mesh, loss_fn=loss_fn,
                 example_input=shard_batch(batch(0)[0], mesh["dp"]).to(ctx.device))
opt = torch.optim.AdamW(pm.parameters(), lr=t.lr)
log(f"[{kind}] {n_params:,} parameters, {layout.degrees()}, dp_mode={layout.dp_mode}, "
    f"{layout.microbatches} micro-batch(es), world size {ctx.world_size}, {ctx.device}")

resolved = dataclasses.replace(lay, dp=layout.dp, tp=layout.tp, pp=layout.pp,
                               dp_mode=layout.dp_mode, schedule=layout.schedule,
                               microbatches=layout.microbatches)
record = RunRecord(config=to_dict(dataclasses.replace(cfg, parallel=resolved)),
                   env=RunRecord.environment(ctx.world_size, ctx.backend, str(ctx.device)))
for step in range(t.steps):
    x, y = (shard_batch(v, mesh["dp"]).to(ctx.device) for v in batch(step))
    stats = CommStats()
    start, cpu = time.perf_counter(), time.process_time()
    opt.zero_grad()
    with CollectiveCounter(stats):  # a Python call per operator: part of the step time
        loss = pm.step(x, y)
    stepped = time.perf_counter()
    opt.step()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    rank_wall, rank_cpu = per_rank(ctx, [elapsed, cpu])
    loss_value = float(loss) if loss is not None else float("nan")  # pp: last stage only
    record.add_epoch({"epoch": step, "train_loss": loss_value, "train_acc": None,
                      "val_acc": None, "test_acc": None, "val_mrr": None, "test_mrr": None,
                      "val_hits": None, "test_hits": None, "epoch_time_s": elapsed,
                      "eval_time_s": None, "sampled_edges": None, "sampled_edges_per_s": None,
                      # pm.step runs forward and backward together (pipelined): one figure.
                      "step_time_s": {"sample": 0.0, "fetch": 0.0,
                                      "forward": stepped - start, "backward": 0.0,
                                      "optimizer": elapsed - (stepped - start), "wait": 0.0},
                      "rank_time_s": {"wall": rank_wall, "cpu": rank_cpu},
                      "comm": comm_totals(stats, ctx), "eval_comm": {}})
    log(f"[{kind}] step {step:3d}  loss {loss_value:.4f}  {elapsed * 1e3:7.1f} ms")

params = parameter_bytes(pm.parameters())
grads = gradient_bytes(pm.parameters())
optim = optimizer_state_bytes(opt)
rows = all_gather_ints(ctx, [params, grads, optim, peak_rss_bytes()]).tolist()
log(f"[{kind}] rank  params(B)  grads(B)  optimiser(B)  peak RSS(MiB)")
for rank, (p, g, o, rss) in enumerate(rows):
    log(f"[{kind}] {rank:4d}  {p:9d}  {g:8d}  {o:12d}  {rss / 2**20:13.1f}")
if ctx.is_main:
    record.status = "complete"
    record.write(f"{out}/{RECORD_FILE}")
    log(f"run record: {out}/{RECORD_FILE}")
shutdown()
