"""Memory, step time and bytes of every dp x tp x pp layout against one process.

    python benchmarks/bench_parallel.py [--small] [--steps N] [--json OUT]

Trains the MLP and the Transformer LM of :mod:`gnnpar.parallel.models` with Adam on 1, 2
and 4 gloo processes, every layout of each world size (plus DDP for dp = 4), from the
same weights on the same batches.  Per layout it measures, on each rank: parameter +
optimiser-state bytes held, peak saved activations, the median step time (steps after
the first two, uninstrumented) and the bytes one steady-state step sent (by collective,
with :class:`~gnnpar.parallel.measure.CollectiveCounter`).  The single-process run of the same
script is the reference every ratio is taken against, and the planner's estimates
(:func:`gnnpar.parallel.planner.estimate`) sit next to what was measured.

Goals (issue 6): parameter + optimiser memory per rank at tp = 2 <= 0.55x and at FSDP
dp = 4 <= 0.3x the single process.
"""

from __future__ import annotations

import json
import statistics
import time
import warnings
from dataclasses import asdict

import torch
import torch.nn.functional as F
from _measure import SavedActivationMeter  # benchmarks/ is the script directory

from gnnpar.comm import CommStats
from gnnpar.config import ArgumentParser
from gnnpar.distributed import init
from gnnpar.parallel.config import ParallelConfig
from gnnpar.parallel.data_parallel import shard_batch
from gnnpar.parallel.measure import CollectiveCounter, optimizer_state_bytes, parameter_bytes
from gnnpar.parallel.models import TransformerConfig, TransformerLM, lm_loss, mlp
from gnnpar.parallel.parallelize import parallelize
from gnnpar.parallel.pipeline_parallel import stage_units_of, units_or_empty
from gnnpar.parallel.planner import estimate
from gnnpar.parallel.profile import profile_model
from gnnpar.parallel.tensor_parallel import default_plan
from gnnpar.testing import run_multiproc

KINDS = ("mlp", "transformer")


def make_case(kind: str, small: bool, steps: int):
    """Seeded model, one global batch per step, loss."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if kind == "mlp":
        width, batch = (256, 32) if small else (1024, 64)
        model = mlp([256, width, width, width, 256])
        data = [(torch.randn(batch, 256, generator=g), torch.randn(batch, 256, generator=g))
                for _ in range(steps)]
        return model, data, F.mse_loss
    cfg = (TransformerConfig(vocab_size=256, dim=64, n_heads=4, n_layers=4, ffn_dim=256,
                             max_seq_len=32) if small else
           TransformerConfig(vocab_size=1024, dim=256, n_heads=8, n_layers=4, ffn_dim=1024,
                             max_seq_len=64))
    batch = 8 if small else 16
    data = [(torch.randint(0, cfg.vocab_size, (batch, cfg.max_seq_len), generator=g),
             torch.randint(0, cfg.vocab_size, (batch, cfg.max_seq_len), generator=g))
            for _ in range(steps)]
    return TransformerLM(cfg), data, lm_loss


def layouts(world_size: int) -> list[ParallelConfig]:
    out = ParallelConfig.layouts(world_size)
    if world_size > 1:
        out.append(ParallelConfig(dp=world_size, dp_mode="ddp"))
    return out


def bench_worker(small: bool, steps: int):
    """On every rank: train each (kind, layout); return what this rank measured."""
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    ctx = init()  # the local rank's GPU when there is one, else the CPU
    results = []
    for kind in KINDS:
        for config in layouts(ctx.world_size):
            mesh = config.build_mesh(ctx.device.type)
            model, data, loss_fn = make_case(kind, small, steps)
            pm = parallelize(model.to(ctx.device), config, mesh, loss_fn=loss_fn,
                             example_input=shard_batch(data[0][0], mesh["dp"]).to(ctx.device))
            opt = torch.optim.Adam(pm.parameters(), lr=1e-3)
            stats, times, meter = CommStats(), [], SavedActivationMeter()
            for step, (x, y) in enumerate(data):
                x, y = (shard_batch(v, mesh["dp"]).to(ctx.device) for v in (x, y))
                start = time.perf_counter()
                opt.zero_grad()
                if step == 1:
                    with CollectiveCounter(stats), meter:
                        pm.step(x, y)
                else:
                    pm.step(x, y)
                opt.step()
                times.append(time.perf_counter() - start)
            results.append({
                "kind": kind, "layout": [config.dp, config.tp, config.pp],
                "dp_mode": config.dp_mode, "rank": ctx.rank,
                "param_bytes": parameter_bytes(pm.parameters()),
                "optimizer_bytes": optimizer_state_bytes(opt),
                "activation_bytes": meter.peak,
                "sent_bytes": sum(c.bytes_sent for c in stats.counters.values()),
                "sent_by_kind": {k: v["bytes_sent"] for k, v in stats.as_dict().items()
                                 if v["bytes_sent"]},
                "step_s": statistics.median(times[2:]),
            })
    return results


def planner_estimate(kind: str, config: ParallelConfig, small: bool, steps: int):
    model, data, _ = make_case(kind, small, steps)
    units = units_or_empty(model)
    plan = default_plan(model, config.tp) if config.tp > 1 else None
    stages = stage_units_of(model, config.pp) if config.pp > 1 else [units]
    return estimate(profile_model(model, data[0][0], units, plan), config, stages)


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small models, quick run")
    parser.add_argument("--steps", type=int, default=8, help="steps per layout (>= 3)")
    parser.add_argument("--json", default=None, help="write the rows to this file")
    args = parser.parse_args()
    steps = max(args.steps, 3)

    measured = []
    for world in (1, 2, 4):
        measured += [r for rank in run_multiproc(bench_worker, world, args.small, steps,
                                                 timeout=1800) for r in rank]
    rows = []
    for kind in KINDS:
        groups: dict[tuple, list[dict]] = {}
        for r in measured:
            if r["kind"] == kind:
                groups.setdefault((*r["layout"], r["dp_mode"]), []).append(r)
        single = groups[(1, 1, 1, "fsdp")][0]
        single_mem = single["param_bytes"] + single["optimizer_bytes"]
        for (dp, tp, pp, mode), ranks in groups.items():
            config = ParallelConfig(dp=dp, tp=tp, pp=pp, dp_mode=mode)
            est = planner_estimate(kind, config, args.small, steps)
            mem = max(r["param_bytes"] + r["optimizer_bytes"] for r in ranks)
            sent = max(r["sent_bytes"] for r in ranks)
            step = max(r["step_s"] for r in ranks)
            act = max(r["activation_bytes"] for r in ranks)
            held = [r["param_bytes"] for r in sorted(ranks, key=lambda r: r["rank"])]
            rows.append({
                "model": kind, "layout": f"dp={dp} tp={tp} pp={pp}" + (" ddp" if mode == "ddp"
                                                                       else ""),
                "world": dp * tp * pp,
                "param_opt_bytes": mem, "mem_ratio": mem / single_mem,
                "step_ms": step * 1e3, "step_ratio": step / single["step_s"],
                "sent_bytes": sent, "sent_est": est.comm_bytes,
                "sent_by_kind": max(ranks, key=lambda r: r["sent_bytes"])["sent_by_kind"],
                "param_est_exact": est.param_bytes == held,
                "act_bytes": act, "act_est": est.activation_bytes,
                "estimate": asdict(est) | {"config": asdict(config)},
            })
    header = (f"{'model':11} {'layout':17} {'P+O B/rank':>11} {'x1':>6} {'step ms':>8} "
              f"{'x1':>6} {'sent B/step':>12} {'planner':>11} {'est/meas':>8} "
              f"{'act B':>9} {'act est':>9} {'P exact':>7}")
    print(header)
    print("-" * len(header))
    for r in rows:
        ratio = r["sent_est"] / r["sent_bytes"] if r["sent_bytes"] else float("nan")
        act_ratio = r["act_est"] / r["act_bytes"] if r["act_bytes"] else float("nan")
        print(f"{r['model']:11} {r['layout']:17} {r['param_opt_bytes']:11d} "
              f"{r['mem_ratio']:6.3f} {r['step_ms']:8.1f} {r['step_ratio']:6.2f} "
              f"{r['sent_bytes']:12d} {r['sent_est']:11d} {ratio:8.3f} "
              f"{r['act_bytes']:9d} {r['act_est']:9d} {str(r['param_est_exact']):>7}"
              f"  (act est/meas {act_ratio:.2f})")
    for kind in KINDS:
        by = {r["layout"]: r for r in rows if r["model"] == kind}
        print(f"{kind}: P+O per rank, tp=2 (world 2): {by['dp=1 tp=2 pp=1']['mem_ratio']:.3f}x "
              f"(goal <= 0.55x); FSDP dp=4: {by['dp=4 tp=1 pp=1']['mem_ratio']:.3f}x "
              f"(goal <= 0.3x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
