"""Train an MLP and a small Transformer LM with data x tensor x pipeline parallelism.

    torchrun --nproc-per-node 4 examples/dnn_hybrid_parallel.py --dp 2 --tp 2 --pp 1

Any ``dp * tp * pp`` equal to the number of processes works (``--dp 1 --tp 2 --pp 2``,
``--dp 4``, ...); ``--plan`` lets :func:`gnnpar.parallel.plan` choose the layout for a
memory budget instead.  Without torchrun it runs on one process.  The data are
synthetic and learnable: the MLP regresses a fixed random teacher network, the LM reads
sequences ``t[i+1] = (5 * t[i] + 3) mod vocab`` from random starts.  Rank 0 prints the
loss and step time of each step, then each rank's memory (parameters, gradients,
optimiser state, peak RSS) and the bytes one step sent, by collective.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
import torch.nn.functional as F

from gnnpar.comm import CommStats, all_gather_ints
from gnnpar.distributed import init, shutdown
from gnnpar.parallel import (
    CollectiveCounter,
    ParallelConfig,
    TransformerConfig,
    TransformerLM,
    gradient_bytes,
    lm_loss,
    mlp,
    optimizer_state_bytes,
    parallelize,
    parameter_bytes,
    plan,
    shard_batch,
)
from gnnpar.parallel.measure import peak_rss_bytes

# FSDP2 warns about in-place ops on view outputs; these models do none.
warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--dp", type=int, default=None, help="data-parallel degree (default: all)")
parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
parser.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree")
parser.add_argument("--dp-mode", choices=["fsdp", "ddp"], default="fsdp")
parser.add_argument("--schedule", choices=["1f1b", "gpipe"], default="1f1b")
parser.add_argument("--microbatches", type=int, default=None, help="default: pp")
parser.add_argument("--model", choices=["mlp", "transformer", "both"], default="both")
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--lr", type=float, default=3e-3)
parser.add_argument("--plan", action="store_true", help="let the planner pick the layout")
parser.add_argument("--memory-budget", type=float, default=64.0, help="MiB per rank, --plan")
args = parser.parse_args()

ctx = init("cpu")
log = print if ctx.is_main else (lambda *a, **k: None)
torch.manual_seed(0)  # the same initial weights on every rank


def build(kind: str):
    """Model, batch generator (the same global batch on every rank) and loss."""
    if kind == "mlp":
        teacher = mlp([64, 32, 16])
        for p in teacher.parameters():
            p.requires_grad_(False)

        def batch(step: int):
            x = torch.randn(args.batch_size, 64, generator=torch.Generator().manual_seed(step))
            return x, teacher(x)

        return mlp([64, 512, 512, 512, 16]), batch, F.mse_loss
    cfg = TransformerConfig(vocab_size=512, dim=128, n_heads=8, n_layers=4, ffn_dim=512,
                            max_seq_len=64)

    def batch(step: int):
        g = torch.Generator().manual_seed(step)
        seq = [torch.randint(0, cfg.vocab_size, (args.batch_size,), generator=g)]
        for _ in range(cfg.max_seq_len):
            seq.append((5 * seq[-1] + 3) % cfg.vocab_size)
        tokens = torch.stack(seq, dim=1)
        return tokens[:, :-1], tokens[:, 1:]

    return TransformerLM(cfg), batch, lm_loss


for kind in (["mlp", "transformer"] if args.model == "both" else [args.model]):
    model, batch, loss_fn = build(kind)
    if args.plan:
        proposal = plan(model, ctx.world_size, int(args.memory_budget * 2**20), batch(0)[0])
        config = proposal.best.config
        log(f"[{kind}] planner: {config.degrees()}, estimated "
            f"{proposal.best.peak_bytes / 2**20:.1f} MiB/rank, "
            f"{len(proposal.rejected)} layouts rejected")
    else:
        config = ParallelConfig(
            dp=args.dp if args.dp is not None else ctx.world_size // (args.tp * args.pp),
            tp=args.tp, pp=args.pp, dp_mode=args.dp_mode, schedule=args.schedule,
            n_microbatches=args.microbatches,
        )
    config.validate(ctx.world_size, args.batch_size)
    mesh = config.build_mesh(ctx.device.type)
    n_params = sum(p.numel() for p in model.parameters())
    pm = parallelize(model, config, mesh, loss_fn=loss_fn,
                     example_input=shard_batch(batch(0)[0], mesh["dp"]))
    opt = torch.optim.AdamW(pm.parameters(), lr=args.lr)
    log(f"[{kind}] {n_params:,} parameters, {config.degrees()}, dp_mode={config.dp_mode}, "
        f"{config.microbatches} micro-batch(es), world size {ctx.world_size}")

    stats = CommStats()
    for step in range(args.steps):
        x, y = batch(step)
        x, y = shard_batch(x, mesh["dp"]), shard_batch(y, mesh["dp"])
        start = time.perf_counter()
        opt.zero_grad()
        if step == 1:  # count one steady-state step (step 0 also sets the pipeline up)
            with CollectiveCounter(stats):
                loss = pm.step(x, y)
        else:
            loss = pm.step(x, y)
        opt.step()
        elapsed = time.perf_counter() - start
        log(f"[{kind}] step {step:3d}  loss {loss.item():.4f}  {elapsed * 1e3:7.1f} ms")

    params = parameter_bytes(pm.parameters())
    grads = gradient_bytes(pm.parameters())
    optim = optimizer_state_bytes(opt)
    rows = all_gather_ints(ctx, [params, grads, optim, peak_rss_bytes(),
                                 stats.total_bytes()]).tolist()
    log(f"[{kind}] rank  params(B)  grads(B)  optimiser(B)  peak RSS(MiB)  sent+recv/step(B)")
    for rank, (p, g, o, rss, c) in enumerate(rows):
        log(f"[{kind}] {rank:4d}  {p:9d}  {g:8d}  {o:12d}  {rss / 2**20:13.1f}  {c:17d}")
    if ctx.is_main:
        for name, counter in stats.as_dict().items():
            log(f"[{kind}]   rank 0 {name}: {counter['calls']} calls, "
                f"{counter['bytes_sent']} B sent, {counter['bytes_recv']} B received")

shutdown()
