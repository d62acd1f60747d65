"""Typed graphs: typed vs homogeneous sampling, embedding bytes per step, memory per rank.

On the typed synthetic graph (``synthetic:typed``: papers with features and labels,
featureless authors and venues, five relations), METIS into 2 parts, 2 gloo ranks, in the
same run:

1. sampled edges per second per rank of ``DistTypedNeighborSampler`` (one fan-out list
   for every relation, [10, 5]) against the homogeneous ``DistNeighborSampler`` on the
   *same* edges: ``ds.to_homogeneous()`` partitioned with the typed partition's
   assignment (``partition_graph(..., assignment=...)``), so both samplers see identical
   parts and global ids (checked).  Same seeds (training papers, 1024 a batch), same
   batch keys, same fan-outs, batches of the two interleaved.  They do not sample the same
   thing -- the typed sampler draws up to ``fanout`` in-edges *per relation* into a node
   (a paper has three relations into it), the homogeneous one up to ``fanout`` in-edges
   per node -- so edges and nodes per batch and the sampling bytes per batch (``CommStats``
   kind ``"sample"``) are printed beside the rates;
2. bytes each rank sends per training step by ``CommStats`` kind, from the run record of
   a short ``Trainer`` run (relation-wise GraphSAGE, the featureless types learning rows
   of a ``DistEmbedding`` updated by ``SparseAdam``): ``embedding`` (rows gathered),
   ``embedding_ids`` (their requests), ``embedding_grad`` (gradients sent to the owners),
   beside ``feature``, ``feature_ids``, ``sample`` and ``grad`` (DDP's all-reduce);
3. peak resident memory (``VmHWM``, :func:`gnnpar.sizes.peak_rss_bytes`) of
   each rank of that 2-rank run, as growth over the rank's resident set after the imports
   once the ``Trainer`` is built, after the last training step (step hook), and at the end
   (the last epoch's sampled evaluation, batch 1024 as training, and the one checkpoint,
   ``checkpoint_every`` past the last epoch), against the same training run in one
   process on the 1-part partition, and against one process that loads the whole typed
   dataset and builds the PyG ``HeteroData`` plus a CSC per relation (what a
   single-machine sampler holds).

    python benchmarks/bench_typed.py [--small] [--papers N] [--authors N] [--venues N]
                                     [--batches N] [--epochs N] [--json OUT]
                                     [--workdir DIR]

Only the samplers' ``sample()`` calls are timed.  Wall-clock figures on a shared machine
are noisy; the per-CPU-second column is steadier.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.config import ArgumentParser
from gnnpar.datasets.synthetic import typed
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import load_partition
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc

FANOUTS = [10, 5]
"""Fan-outs per hop: for every relation (typed), for every node (homogeneous)."""
BATCH = 1024
"""Seed papers per batch and rank (sampler and training)."""
HIDDEN = 128
"""GraphSAGE width, and the width of the featureless types' embedding rows."""
KINDS = ("embedding", "embedding_ids", "embedding_grad", "feature", "feature_ids", "sample",
         "grad")
"""The ``CommStats`` kinds printed per training step."""
MEMORY_FIELDS = ("rank", "rss_after_import", "built_growth", "built_peak_growth",
                 "steps_peak_growth", "peak_rss", "peak_growth", "embedding_rows",
                 "embedding_bytes_held")
"""What the JSON keeps of each training process's memory figures."""


def make_partitions(workdir: Path, papers: int, authors: int, venues: int
                    ) -> tuple[str, dict[str, Path], Path, dict[str, Any]]:
    """Generate the typed graph and write its partitions, reusing those already there.

    ``typed2`` (METIS, 2 parts), ``typed1`` (1 part), ``homo2`` (the homogeneous view with
    ``typed2``'s assignment) and the dataset directory (for the whole-graph process).

    Returns:
        A tag naming the graph, the partition directory of each name, the dataset
        directory, and the dataset's summary.
    """
    tag = f"typed-p{papers}-a{authors}-v{venues}"
    ds = typed(num_papers=papers, num_authors=authors, num_venues=venues, seed=0)
    dirs = {name: workdir / f"{tag}-{name}" for name in ("typed2", "typed1", "homo2")}
    for name, k in (("typed2", 2), ("typed1", 1)):
        if not (dirs[name] / "meta.json").exists():
            t = time.perf_counter()
            partition_graph(ds, dirs[name],
                            PartitionConfig(num_parts=k, partitioner="metis", seed=0),
                            overwrite=True)
            print(f"  partitioned {name}: {k} part(s) (metis) in "
                  f"{time.perf_counter() - t:.1f} s")
    parts = [load_partition(dirs["typed2"], k) for k in range(2)]
    if not (dirs["homo2"] / "meta.json").exists():
        assignment = np.empty(sum(ds.num_nodes.values()), dtype=np.int64)
        for k, part in enumerate(parts):
            assignment[np.asarray(part.orig_ids)] = k
        t = time.perf_counter()
        partition_graph(ds.to_homogeneous(), dirs["homo2"], PartitionConfig(num_parts=2),
                        assignment=assignment, overwrite=True)
        print(f"  partitioned homo2: the homogeneous view, typed2's assignment, in "
              f"{time.perf_counter() - t:.1f} s")
    for k, part in enumerate(parts):  # identical parts: same owned nodes, ids and edges
        other = load_partition(dirs["homo2"], k)
        if not (np.array_equal(np.asarray(part.orig_ids), np.asarray(other.orig_ids))
                and np.array_equal(np.asarray(part.train_idx), np.asarray(other.train_idx))
                and part.indices.shape == other.indices.shape):
            raise SystemExit(f"part {k} of the homogeneous partition differs from the typed "
                             "one; remove the partitions under --workdir and rerun.")
    ds_dir = workdir / f"{tag}-dataset"
    if not (ds_dir / "dataset.json").exists():
        ds.save(ds_dir)
    return tag, dirs, ds_dir, {**ds.summary(),
                               "relations": [",".join(et) for et in ds.edge_types]}


def _sampler_worker(typed_dir: str, homo_dir: str, num_batches: int,
                    warmup: int) -> dict[str, Any]:
    import torch

    from gnnpar import distributed
    from gnnpar.comm import CommStats
    from gnnpar.sampling.fanouts import Fanouts
    from gnnpar.sampling.neighbor import DistNeighborSampler
    from gnnpar.sampling.typed import DistTypedNeighborSampler
    from gnnpar.storage.graph import DistGraph

    ctx = distributed.init()
    graphs = {"typed": DistGraph.load(typed_dir, ctx, verify=False),
              "homogeneous": DistGraph.load(homo_dir, ctx, verify=False)}
    stats = {name: CommStats() for name in graphs}
    fanouts = {name: Fanouts.for_graph(FANOUTS, g, ctx) for name, g in graphs.items()}
    samplers = {"typed": DistTypedNeighborSampler(graphs["typed"], ctx, fanouts["typed"],
                                                   stats=stats["typed"]),
                "homogeneous": DistNeighborSampler(graphs["homogeneous"], ctx,
                                                   fanouts["homogeneous"],
                                                   stats=stats["homogeneous"])}
    g = graphs["typed"]
    train = torch.from_numpy(np.asarray(g.part.train_idx).astype(np.int64)) + g.first_gid
    gen = torch.Generator().manual_seed(ctx.rank)
    seeds = train[torch.randperm(train.numel(), generator=gen)]
    seeds = torch.cat([seeds, seeds[:BATCH]])  # every batch full, its ids distinct
    num_rel = len(g.meta.types.layout.edge_types)  # type: ignore[union-attr]
    zero = dict.fromkeys(("edges", "nodes", "wall_s", "cpu_s"), 0.0)
    sums = {name: dict(zero) for name in graphs}
    per_relation = torch.zeros(num_rel, dtype=torch.int64)
    for i in range(warmup + num_batches):
        if i == warmup:
            sums = {name: dict(zero) for name in graphs}
            per_relation.zero_()
            for s in stats.values():
                s.reset()
        start = (i * BATCH) % train.numel()
        batch = seeds[start:start + BATCH]
        for name, sampler in samplers.items():
            wall, cpu = time.perf_counter(), time.process_time()
            out = sampler.sample(batch, i, num_owned_seeds=batch.numel())
            sums[name]["wall_s"] += time.perf_counter() - wall
            sums[name]["cpu_s"] += time.process_time() - cpu
            sums[name]["edges"] += out.row.numel()
            sums[name]["nodes"] += out.node.numel()
            if name == "typed":
                assert out.edge_type is not None
                per_relation += torch.bincount(out.edge_type, minlength=num_rel)
    res = {name: {**sums[name], "batches": num_batches, "comm": stats[name].as_dict()}
           for name in graphs}
    res["typed"]["edges_per_relation"] = per_relation.tolist()
    torch.distributed.barrier()
    distributed.shutdown()
    return res


def _train_worker(part_dir: str, out: str, epochs: int) -> dict[str, Any]:
    import torch  # noqa: F401  (imported before the baseline, as the trainer needs it)
    import torch_geometric  # noqa: F401

    from gnnpar import distributed
    from gnnpar.sizes import peak_rss_bytes, rss_bytes
    from gnnpar.train.config import Config, ModelConfig, RunConfig, SampleConfig, TrainConfig
    from gnnpar.train.trainer import Trainer

    ctx = distributed.init()
    base = rss_bytes()
    cfg = Config(model=ModelConfig(hidden=HIDDEN),
                 train=TrainConfig(epochs=epochs, eval="none", lr=0.01, sparse_lr=0.05),
                 sample=SampleConfig(fanouts=tuple(FANOUTS), batch_size=BATCH,
                                     eval_batch_size=BATCH),
                 run=RunConfig(out=out, progress=False, checkpoint_every=epochs + 1))
    trainer = Trainer(cfg, part_dir, ctx)
    built, built_peak = rss_bytes(), peak_rss_bytes()
    steps_peak = [built_peak]

    def hook(epoch: int, step: int, batch: Any) -> None:
        steps_peak[0] = peak_rss_bytes()  # after each optimizer step

    summary = trainer.fit(hook)
    emb = trainer.engine.embedding
    res = {"rank": ctx.rank, "summary": summary, "rss_after_import": base,
           "peak_rss": peak_rss_bytes(), "steps_per_epoch": trainer.engine.steps_per_epoch,
           "last_epoch_comm": trainer.stats.as_dict(),
           "embedding_rows": 0 if emb is None else int(emb.weight.shape[0]),
           "embedding_bytes_held": 0 if emb is None else int(
               emb.weight.numel() * emb.weight.element_size())}
    res["peak_growth"] = res["peak_rss"] - base
    res["built_growth"], res["built_peak_growth"] = built - base, built_peak - base
    res["steps_peak_growth"] = steps_peak[0] - base
    distributed.shutdown()
    return res


def _whole_graph_worker(dataset_dir: str) -> dict[str, int]:
    """Peak RSS of one process that loads the whole typed graph as a PyG ``HeteroData``."""
    import torch
    import torch_geometric  # noqa: F401

    from gnnpar.datasets.typed import TypedGraphDataset
    from gnnpar.sizes import peak_rss_bytes, rss_bytes

    base = rss_bytes()
    data = TypedGraphDataset.load(dataset_dir, mmap=False).to_pyg()
    for et in data.edge_types:  # a single-machine sampler's CSC per relation
        ei = data[et].edge_index
        data[et].csc = ei[0][torch.argsort(ei[1])]
    return {"rss_after_import": base, "peak_rss": peak_rss_bytes(),
            "peak_growth": peak_rss_bytes() - base}


def _sampling_rows(ranks: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per-rank means of each sampler's figures."""
    world, out = len(ranks), {}
    for name in ("typed", "homogeneous"):
        rs = [r[name] for r in ranks]
        n = rs[0]["batches"]
        comm = [r["comm"].get("sample", {}) for r in rs]
        out[name] = {
            "edges_per_s": sum(r["edges"] / r["wall_s"] for r in rs) / world,
            "edges_per_cpu_s": sum(r["edges"] / r["cpu_s"] for r in rs) / world,
            "ms_per_batch": sum(r["wall_s"] for r in rs) / world / n * 1e3,
            "edges_per_batch": sum(r["edges"] for r in rs) / world / n,
            "nodes_per_batch": sum(r["nodes"] for r in rs) / world / n,
            "sample_bytes_sent_per_batch": sum(c.get("bytes_sent", 0) for c in comm)
            / world / n,
            "sample_calls_per_batch": sum(c.get("calls", 0) for c in comm) / world / n,
        }
        out[name]["sample_bytes_per_edge"] = (out[name]["sample_bytes_sent_per_batch"]
                                              / out[name]["edges_per_batch"])
    out["typed"]["edges_per_relation_per_batch"] = [
        sum(r["typed"]["edges_per_relation"][i] for r in ranks) / world / n
        for i in range(len(ranks[0]["typed"]["edges_per_relation"]))]
    return out


def _step_bytes(ranks: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Bytes and rows each rank sends per training step, by kind (the run record's)."""
    summary = next(r["summary"] for r in ranks if r["rank"] == 0)
    steps, world = summary["steps_per_epoch"], len(ranks)
    comm = summary["comm_per_epoch"]
    return {k: {"bytes": comm.get(k, {}).get("bytes", 0) / steps / world,
                "rows": comm.get(k, {}).get("rows", 0) / steps / world}
            for k in sorted({*KINDS, *comm})}


def main() -> None:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="6,000 papers instead of --papers")
    ap.add_argument("--papers", type=int, default=60_000)
    ap.add_argument("--authors", type=int, default=None, help="default papers / 2")
    ap.add_argument("--venues", type=int, default=None, help="default papers / 100")
    ap.add_argument("--batches", type=int, default=30, help="timed sampler batches per rank")
    ap.add_argument("--epochs", type=int, default=3,
                    help="training epochs (the record averages those after the first)")
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--workdir", help="where partitions are written (reused if present)")
    args = ap.parse_args()
    papers = 6_000 if args.small else args.papers
    authors = args.authors or papers // 2
    venues = args.venues or max(papers // 100, 6)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gnnpar-bench-"))
    t_all = time.perf_counter()
    tag, dirs, ds_dir, info = make_partitions(workdir, papers, authors, venues)
    print(f"graph: synthetic:typed, {papers:,} papers (32 features), {authors:,} authors, "
          f"{venues:,} venues; {info['num_nodes']:,} nodes, {info['num_edges']:,} edges in "
          f"5 relations; METIS, 2 gloo ranks; fan-outs {FANOUTS}, batch {BATCH}")
    env = {"OMP_NUM_THREADS": "1"}

    sampling = _sampling_rows(run_multiproc(_sampler_worker, 2, str(dirs["typed2"]),
                                            str(dirs["homo2"]), args.batches, 3, env=env,
                                            timeout=1800))
    train2 = run_multiproc(_train_worker, 2, str(dirs["typed2"]),
                           str(workdir / f"{tag}-run2"), args.epochs, env=env, timeout=1800)
    train1 = run_multiproc(_train_worker, 1, str(dirs["typed1"]),
                           str(workdir / f"{tag}-run1"), args.epochs, env=env, timeout=1800)
    whole = run_multiproc(_whole_graph_worker, 1, str(ds_dir), env=env, timeout=1800)[0]
    steps = _step_bytes(train2)

    t, h = sampling["typed"], sampling["homogeneous"]
    print(f"\nsampling, per rank, {args.batches} timed batches of {BATCH} training papers "
          "(interleaved, same seeds)")
    print(f"  {'':13s} {'edges/s':>9s} {'edges/CPU-s':>11s} {'ms/batch':>9s} "
          f"{'edges/batch':>11s} {'nodes/batch':>11s} {'sample kB/batch':>15s} {'B/edge':>7s}")
    for name, r in sampling.items():
        print(f"  {name:13s} {r['edges_per_s'] / 1e6:7.2f} M {r['edges_per_cpu_s'] / 1e6:9.2f} M"
              f" {r['ms_per_batch']:9.1f} {r['edges_per_batch']:11,.0f} "
              f"{r['nodes_per_batch']:11,.0f} {r['sample_bytes_sent_per_batch'] / 1e3:15.1f} "
              f"{r['sample_bytes_per_edge']:7.1f}")
    print(f"  typed / homogeneous: edges/s {t['edges_per_s'] / h['edges_per_s']:.2f}x, "
          f"edges/CPU-s {t['edges_per_cpu_s'] / h['edges_per_cpu_s']:.2f}x, edges/batch "
          f"{t['edges_per_batch'] / h['edges_per_batch']:.2f}x, sample bytes/batch "
          f"{t['sample_bytes_sent_per_batch'] / h['sample_bytes_sent_per_batch']:.2f}x")
    rels = info["relations"]
    print("  typed edges per batch by relation: " + ", ".join(
        f"{r} {v:,.0f}" for r, v in zip(rels, t["edges_per_relation_per_batch"], strict=True)))

    s0 = next(r for r in train2 if r["rank"] == 0)["summary"]
    print(f"\ntraining, 2 ranks: {s0['steps_per_epoch']} steps per epoch, {args.epochs} epochs, "
          f"GraphSAGE 2x{HIDDEN}, embedding width {HIDDEN} (SparseAdam); bytes sent per rank "
          "per step (mean of the epochs after the first)")
    for k in (*KINDS, *sorted(set(steps) - set(KINDS))):
        print(f"  {k:16s} {steps[k]['bytes'] / 1e3:10.1f} kB  {steps[k]['rows']:10,.0f} rows")
    emb = sum(steps[k]["bytes"] for k in ("embedding", "embedding_ids", "embedding_grad"))
    allb = sum(v["bytes"] for v in steps.values())
    print(f"  embedding kinds together {emb / 1e3:.1f} kB of {allb / 1e3:.1f} kB "
          f"({emb / allb:.1%})")

    one = train1[0]
    print("\npeak resident memory (VmHWM): its growth over the resident set after the imports "
          "once the Trainer is built, at the last training step, and at the end (final sampled "
          "evaluation and checkpoint, which gathers the whole embedding table and its "
          "optimiser state on rank 0); MiB")
    print(f"  {'':22s} {'built':>7s} {'steps':>7s} {'end':>7s} {'peak RSS':>9s}   "
          f"{'steps / 1 process':>17s} {'end / 1 process':>15s} {'peak / 1 process':>16s}")
    rows = [(f"2 ranks, rank {r['rank']}", r) for r in sorted(train2, key=lambda r: r["rank"])]
    for label, r in [*rows, ("1 process, 1 part", one)]:
        print(f"  {label:22s} {r['built_peak_growth'] / 2**20:7.0f} "
              f"{r['steps_peak_growth'] / 2**20:7.0f} {r['peak_growth'] / 2**20:7.0f} "
              f"{r['peak_rss'] / 2**20:9.0f}   "
              f"{r['steps_peak_growth'] / one['steps_peak_growth']:16.2f}x "
              f"{r['peak_growth'] / one['peak_growth']:14.2f}x "
              f"{r['peak_rss'] / one['peak_rss']:15.2f}x")
    largest = max(r["steps_peak_growth"] for r in train2)
    print(f"  whole graph as PyG HeteroData + CSC per relation: growth "
          f"{whole['peak_growth'] / 2**20:.0f} MiB, peak RSS {whole['peak_rss'] / 2**20:.0f} MiB;"
          f" the largest rank's growth at the steps is {largest / whole['peak_growth']:.2f}x it")
    wall = time.perf_counter() - t_all
    print(f"\n{wall:.0f} s in all")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "graph": info, "fanouts": FANOUTS,
            "batch": BATCH, "hidden": HIDDEN, "batches": args.batches, "epochs": args.epochs,
            "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "wall_s": wall,
            "sampling": sampling,
            "sampling_ratio_typed_over_homogeneous": {
                k: t[k] / h[k] for k in ("edges_per_s", "edges_per_cpu_s", "edges_per_batch",
                                         "sample_bytes_sent_per_batch")},
            "relations": rels,
            "train_bytes_sent_per_rank_per_step": steps,
            "train_summary_2ranks": s0, "train_summary_1rank": one["summary"],
            "memory": {
                "ranks_2": [{k: r[k] for k in MEMORY_FIELDS}
                            for r in sorted(train2, key=lambda r: r["rank"])],
                "one_process_1part": {k: one[k] for k in MEMORY_FIELDS},
                "whole_heterodata": whole},
        }, indent=2, default=str))


if __name__ == "__main__":
    main()
