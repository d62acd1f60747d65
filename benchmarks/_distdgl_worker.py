r"""DistDGL side of ``benchmarks/bench_vs_distdgl.py``; run only by the DGL venv's python.

    /work/.distdgl-venv/bin/python benchmarks/_distdgl_worker.py partition \
        --dataset DATASET_DIR --name NAME --out PART_DIR
    ... serve                  (DGL_ROLE=server and the other DGL_* variables set)
    ... train --ip-config IP --name NAME --part-config PART_DIR/NAME.json --result OUT.json
    ... step --batches BATCHES.npz --rounds R --hidden H --classes C --result OUT.json
    ... sample --dataset DATASET_DIR --fanouts 10,15 --batches N --result OUT.json

``bench_vs_distdgl.py`` starts all of these itself (it installs DGL 2.1.0 from PyPI into a
venv of its own, since gnnpar's venv has a newer torch than DGL's wheels support); this
file never imports gnnpar and gnnpar never imports it.

* ``partition``: reads a ``GraphDataset.save`` directory with numpy (``allow_pickle=False``)
  and runs ``dgl.distributed.partition_graph`` (METIS, training nodes and edges balanced).
* ``serve``: one DistGraph server (``dgl.distributed.initialize`` in server mode never
  returns); its configuration comes from the ``DGL_*`` variables, as ``tools/launch.py``
  in the DGL repository sets them.
* ``step``: DGL's GraphSAGE forward and backward on the batches gnnpar sampled
  (``bench_step.py`` writes them): each becomes DGL's blocks, then the same model as
  ``train`` runs them; per-step milliseconds as JSON.
* ``sample``: DGL's ``NeighborSampler`` on a whole dataset in one process (several of
  these run side by side for "per rank" figures): sampled edges per second as JSON.
* ``train``: one trainer, started by ``python -m torch.distributed.run`` as DGL's
  ``tools/launch.py`` starts them, whose loop is DGL's own example's
  (``examples/distributed/graphsage/node_classification.py`` at v2.1.0: ``initialize``,
  ``init_process_group`` from torchrun's environment, ``DistGraph``, ``node_split``,
  ``DistNodeDataLoader`` over a ``NeighborSampler``, ``dgl.nn.SAGEConv``, DDP with
  ``join()`` over gloo, Adam). Rank 0 writes the per-epoch times, each rank's CPU seconds
  and the accuracies as JSON.

Fan-outs: DGL lists them per GNN layer from the input layer to the output layer and samples
them in reverse (``for fanout in reversed(self.fanouts)`` in
``dgl/dataloading/neighbor_sampler.py``), so the first hop from the seeds uses the *last*
entry. gnnpar's ``--fanouts 15,10`` (15 neighbours of each seed, then 10 of each of those)
is therefore DGL's ``MultiLayerNeighborSampler([10, 15])``; ``--fanouts`` here takes the
DGL order.

One work-around is needed to simulate two machines on one host: DistDGL finds "its" machine
by looking for a server address of the ip_config among the host's interface addresses
(``rpc_client.get_local_machine_id``), which cannot tell two simulated machines on loopback
apart (both would be machine 0 and read the wrong partition). The trainer therefore
replaces that one lookup by ``--machine-id``; nothing else in DGL is changed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("DGLBACKEND", "pytorch")

import dgl  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402


def _load_dataset(path: Path) -> dict[str, Any]:
    """Read a ``GraphDataset.save`` directory without pickle.

    Args:
        path: The dataset directory (``dataset.json`` and ``*.npy``).

    Returns:
        ``{"meta", "src", "dst", "x", "y", "train_idx", "val_idx", "test_idx"}``.
    """
    meta_path = path / "dataset.json"
    if not meta_path.is_file():
        sys.exit(f"_distdgl_worker: {meta_path} is missing; pass a directory written by "
                 "GraphDataset.save (bench_vs_distdgl.py makes one).")
    out: dict[str, Any] = {"meta": json.loads(meta_path.read_text())}
    for name in ("src", "dst", "x", "y", "train_idx", "val_idx", "test_idx"):
        out[name] = np.load(path / f"{name}.npy", allow_pickle=False)
    return out


def cmd_partition(args: argparse.Namespace) -> None:
    """Partition the dataset with ``dgl.distributed.partition_graph`` and print a JSON line."""
    t0 = time.perf_counter()
    d = _load_dataset(Path(args.dataset))
    n = int(d["meta"]["num_nodes"])
    g = dgl.graph((torch.from_numpy(d["src"]), torch.from_numpy(d["dst"])), num_nodes=n)
    g.ndata["feat"] = torch.from_numpy(np.ascontiguousarray(d["x"], dtype=np.float32))
    g.ndata["label"] = torch.from_numpy(np.ascontiguousarray(d["y"], dtype=np.int64))
    for split in ("train", "val", "test"):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[torch.from_numpy(d[f"{split}_idx"])] = True
        g.ndata[f"{split}_mask"] = mask
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    orig_nids, _ = dgl.distributed.partition_graph(
        g, args.name, num_parts=args.num_parts, out_path=args.out, part_method="metis",
        balance_ntypes=g.ndata["train_mask"], balance_edges=True, return_mapping=True,
    )
    partition_s = time.perf_counter() - t0
    quality = _quality(Path(args.out) / f"{args.name}.json", orig_nids.numpy(), d)
    print(json.dumps({"load_s": load_s, "partition_s": partition_s, "num_nodes": n,
                      "num_edges": int(g.num_edges()), "quality": quality,
                      "part_config": str(Path(args.out) / f"{args.name}.json")}), flush=True)


def _quality(config: Path, orig_nids: np.ndarray, d: dict[str, Any]) -> dict[str, Any]:
    """Edge cut, halo sizes and balance of a DGL partition, as gnnpar's meta.json has them.

    Args:
        config: The partition config (its ``node_map`` gives each part's new-id range).
        orig_nids: Original id of every new (reshuffled) node id.
        d: The dataset arrays.
    """
    ranges = json.loads(config.read_text())["node_map"]["_N"]
    part_new = np.empty(len(orig_nids), dtype=np.int64)
    for p, (lo, hi) in enumerate(ranges):
        part_new[lo:hi] = p
    part = np.empty_like(part_new)
    part[orig_nids] = part_new  # part of every original node id
    src, dst = d["src"], d["dst"]
    ps, pd = part[src], part[dst]
    k = len(ranges)
    owned = np.bincount(part, minlength=k)
    train = np.bincount(part[d["train_idx"]], minlength=k)
    edges = np.bincount(pd, minlength=k)  # in-edges of owned nodes
    cut = ps != pd
    halo = [len(np.unique(src[cut & (pd == p)])) for p in range(k)]
    return {
        "edge_cut": int(cut.sum()), "edge_cut_share": float(cut.mean()),
        "replication_factor": float((owned.sum() + sum(halo)) / len(part)),
        "per_part": {"owned": owned.tolist(), "halo": halo, "train": train.tolist(),
                     "edges": edges.tolist()},
        "imbalance": {name: float(v.max() / v.mean()) for name, v in
                      (("nodes", owned), ("train", train), ("edges", edges),
                       ("halo", np.asarray(halo)))},
    }


def cmd_serve(args: argparse.Namespace) -> None:
    """Run one DistGraph server; ``initialize`` serves until the trainers shut it down."""
    for var in ("DGL_ROLE", "DGL_SERVER_ID", "DGL_IP_CONFIG", "DGL_NUM_SERVER",
                "DGL_NUM_CLIENT", "DGL_CONF_PATH"):
        if var not in os.environ:
            sys.exit(f"_distdgl_worker serve: {var} is not set; bench_vs_distdgl.py sets the "
                     "DGL_* variables (as DGL's tools/launch.py does).")
    torch.set_num_threads(1)
    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])


class SAGE(nn.Module):
    """GraphSAGE (mean aggregator): ReLU and dropout after every layer but the last."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int, dropout: float):
        """Build ``layers`` ``SAGEConv(..., "mean")`` layers."""
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.layers = nn.ModuleList(
            dgl.nn.SAGEConv(dims[i], dims[i + 1], "mean") for i in range(layers))
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks: list[Any], x: torch.Tensor) -> torch.Tensor:
        """Apply layer ``i`` on block ``i`` (DGL's MFGs, input layer first)."""
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h


def _patch_machine_id(machine_id: int) -> None:
    """Make DGL's client believe it runs on simulated machine ``machine_id`` (see top)."""
    from dgl.distributed import rpc_client

    rpc_client.get_local_machine_id = lambda server_namebook: machine_id


def _sampled_accuracy(model: nn.Module, g: Any, nids: torch.Tensor, fanouts: list[int],
                      batch_size: int) -> tuple[int, int]:
    """Correct predictions and count over ``nids`` on sampled neighbourhoods (local only)."""
    sampler = dgl.dataloading.MultiLayerNeighborSampler(fanouts)
    loader = dgl.dataloading.DistNodeDataLoader(g, nids, sampler, batch_size=batch_size,
                                                shuffle=False, drop_last=False)
    correct = total = 0
    model.eval()
    with torch.no_grad():
        for input_nodes, seeds, blocks in loader:
            logits = model(blocks, g.ndata["feat"][input_nodes])
            correct += int((logits.argmax(1) == g.ndata["label"][seeds]).sum())
            total += len(seeds)
    model.train()
    return correct, total


def _full_inference(model: SAGE, g: Any, batch_size: int) -> Any:
    """Layer-wise full-neighbour inference over all nodes; returns the logits DistTensor."""
    pb = g.get_partition_book()
    nodes = dgl.distributed.node_split(torch.ones(g.num_nodes(), dtype=torch.bool), pb,
                                       force_even=True)
    x = g.ndata["feat"]
    model.eval()
    with torch.no_grad():
        for i, layer in enumerate(model.layers):
            last = i == len(model.layers) - 1
            y = dgl.distributed.DistTensor((g.num_nodes(), layer._out_feats), torch.float32,
                                           f"bench_h{i}", persistent=True)
            sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1)
            loader = dgl.dataloading.DistNodeDataLoader(g, nodes, sampler,
                                                        batch_size=batch_size, shuffle=False,
                                                        drop_last=False)
            for input_nodes, seeds, blocks in loader:
                h = x[input_nodes]
                h = layer(blocks[0], (h, h[: blocks[0].num_dst_nodes()]))
                if not last:
                    h = F.relu(h)
                y[seeds] = h
            x = y
            g.barrier()
    model.train()
    return x


def _blocks(edge_index: torch.Tensor, nodes: list[int], edges: list[int]) -> list[Any]:
    """DGL's blocks (input layer first) of one batch in PyG ``NeighborLoader`` order.

    Block ``i`` of ``L`` has the nodes within ``L - i`` hops of the seeds as destinations,
    those within ``L - i + 1`` hops as sources and the edges into its destinations, which
    are the first ones of ``edge_index`` (stored hop by hop): DGL's message-flow graphs.
    """
    hops = len(edges)
    out = []
    for i in range(hops):
        n_dst, n_src = sum(nodes[: hops - i]), sum(nodes[: hops - i + 1])
        e = sum(edges[: hops - i])
        out.append(dgl.create_block((edge_index[0, :e], edge_index[1, :e]),
                                    num_src_nodes=n_src, num_dst_nodes=n_dst))
    return out


def cmd_step(args: argparse.Namespace) -> None:
    """Time DGL's GraphSAGE forward, backward and Adam step on gnnpar's batches."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    with np.load(args.batches, allow_pickle=False) as f:
        count = int(f["count"])
        batches = [{k: torch.from_numpy(f[f"{k}{i}"]) for k in ("x", "ei", "y", "nodes",
                                                                  "edges")}
                   for i in range(count)]
    in_dim = int(batches[0]["x"].shape[1])
    model = SAGE(in_dim, args.hidden, args.classes, len(batches[0]["edges"]), args.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    phases = ("blocks", "forward", "backward", "optimizer")
    totals = {f"{k}_{c}": 0.0 for k in phases for c in ("ms", "cpu_ms")}
    steps = 0
    for r in range(args.rounds + 1):  # round 0 warms up
        for b in batches:
            t = [(time.perf_counter(), time.process_time())]
            blocks = _blocks(b["ei"], b["nodes"].tolist(), b["edges"].tolist())
            seeds = int(b["nodes"][0])
            t.append((time.perf_counter(), time.process_time()))
            logits = model(blocks, b["x"])
            loss = F.cross_entropy(logits, b["y"][:seeds])
            t.append((time.perf_counter(), time.process_time()))
            opt.zero_grad()
            loss.backward()
            t.append((time.perf_counter(), time.process_time()))
            opt.step()
            t.append((time.perf_counter(), time.process_time()))
            if r:
                steps += 1
                for i, k in enumerate(phases):
                    totals[f"{k}_ms"] += 1e3 * (t[i + 1][0] - t[i][0])
                    totals[f"{k}_cpu_ms"] += 1e3 * (t[i + 1][1] - t[i][1])
    result: dict[str, Any] = {k: v / steps for k, v in totals.items()}
    result.update(steps=steps, dgl=dgl.__version__, torch=torch.__version__,
                  threads=torch.get_num_threads())
    Path(args.result).write_text(json.dumps(result))


def cmd_sample(args: argparse.Namespace) -> None:
    """Sampled edges per second of DGL's ``NeighborSampler`` on a whole dataset."""
    torch.set_num_threads(args.threads)
    d = _load_dataset(Path(args.dataset))
    n = int(d["meta"]["num_nodes"])
    g = dgl.graph((torch.from_numpy(d["src"]), torch.from_numpy(d["dst"])), num_nodes=n)
    g = g.formats("csc")  # in-edges, as the sampler reads them (what DistDGL stores)
    g.create_formats_()
    sampler = dgl.dataloading.NeighborSampler([int(k) for k in args.fanouts.split(",")])
    gen = torch.Generator().manual_seed(args.seed)
    dgl.random.seed(args.seed)
    seeds = torch.randperm(n, generator=gen)
    edges = 0
    for i in range(args.warmup + args.batches):
        if i == args.warmup:
            edges, wall, cpu = 0, time.perf_counter(), time.process_time()
        batch = seeds[(i * args.batch_size) % n:][: args.batch_size]
        _, _, blocks = sampler.sample(g, batch)
        edges += sum(b.num_edges() for b in blocks)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    Path(args.result).write_text(json.dumps({
        "edges": edges, "wall_s": wall, "cpu_s": cpu, "edges_per_s": edges / wall,
        "edges_per_cpu_s": edges / cpu, "batches": args.batches, "dgl": dgl.__version__}))


def cmd_train(args: argparse.Namespace) -> None:
    """One DistDGL trainer, started by ``torch.distributed.run`` as DGL's example is.

    The training loop is DGL's ``examples/distributed/graphsage/node_classification.py``
    (tag v2.1.0): ``dgl.distributed.initialize``, ``init_process_group`` from torchrun's
    environment, ``node_split(..., force_even=True)``, ``DistNodeDataLoader`` over a
    ``NeighborSampler``, DDP with ``model.join()`` for uneven batch counts, Adam; timed by
    phase as the example times it. Then the accuracies (below).
    """
    torch.set_num_threads(args.threads)
    # torchrun's node rank is the simulated machine's id (one trainer per machine).
    _patch_machine_id(int(os.environ["GROUP_RANK"]))
    t_start = time.perf_counter()
    dgl.distributed.initialize(args.ip_config)
    torch.distributed.init_process_group("gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    torch.manual_seed(args.seed)
    dgl.random.seed(args.seed + rank)

    g = dgl.distributed.DistGraph(args.name, part_config=args.part_config)
    pb = g.get_partition_book()
    train_nid = dgl.distributed.node_split(g.ndata["train_mask"], pb, force_even=True)
    val_nid = dgl.distributed.node_split(g.ndata["val_mask"], pb, force_even=True)
    test_nid = dgl.distributed.node_split(g.ndata["test_mask"], pb, force_even=True)
    local = pb.partid2nids(pb.partid)
    in_dim = int(g.ndata["feat"].shape[1])
    num_classes = int(args.num_classes)
    setup_s = time.perf_counter() - t_start

    fanouts = [int(k) for k in args.fanouts.split(",")]
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = dgl.dataloading.DistNodeDataLoader(g, train_nid, sampler,
                                                batch_size=args.batch_size, shuffle=True,
                                                drop_last=False)
    model = SAGE(in_dim, args.hidden, num_classes, len(fanouts), args.dropout)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr)

    epochs: list[dict[str, Any]] = []
    for epoch in range(args.epochs):
        t0, c0 = time.perf_counter(), time.process_time()
        loss_sum = correct = seen = edges = steps = 0.0
        phase = dict.fromkeys(("sample", "forward", "backward", "optimizer"), 0.0)
        with ddp.join():
            ts = time.perf_counter()
            for input_nodes, seeds, blocks in loader:
                x = g.ndata["feat"][input_nodes]
                y = g.ndata["label"][seeds].long()
                tf = time.perf_counter()
                logits = ddp(blocks, x)
                loss = F.cross_entropy(logits, y)
                tb = time.perf_counter()
                opt.zero_grad()
                loss.backward()
                to = time.perf_counter()
                opt.step()
                te = time.perf_counter()
                for k, dt in zip(phase, (tf - ts, tb - tf, to - tb, te - to), strict=True):
                    phase[k] += dt
                loss_sum += float(loss) * len(seeds)
                correct += int((logits.argmax(1) == y).sum())
                seen += len(seeds)
                edges += sum(b.num_edges() for b in blocks)
                steps += 1
                ts = time.perf_counter()
        # The epoch ends on each rank when its last batch is done (as in DGL's example).
        epoch_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
        mine = torch.tensor([loss_sum, correct, seen, edges, steps, epoch_s, cpu_s,
                             *phase.values()], dtype=torch.float64)
        each = [torch.zeros_like(mine) for _ in range(world)]
        torch.distributed.all_gather(each, mine)
        tot = torch.stack(each).sum(0)
        epochs.append({"epoch": epoch, "epoch_time_s": float(tot[5]) / world,
                       "steps": int(tot[4]) // world,
                       "train_loss": float(tot[0] / tot[2]),
                       "train_acc": float(tot[1] / tot[2]),
                       "sampled_edges": int(tot[3]),
                       # Seconds per rank by phase, as gnnpar's run record has them.
                       "step_time_s": {k: float(v) / world for k, v in
                                       zip(phase, tot[7:].tolist(), strict=True)},
                       "rank_time_s": {"wall": [float(e[5]) for e in each],
                                       "cpu": [float(e[6]) for e in each]}})
        if rank == 0:
            print(f"distdgl epoch {epoch + 1}/{args.epochs}: {epochs[-1]['epoch_time_s']:.2f}"
                  f" s, loss {epochs[-1]['train_loss']:.4f}", flush=True)

    t0 = time.perf_counter()
    acc = torch.tensor([*_sampled_accuracy(model, g, val_nid, fanouts, args.eval_batch_size),
                        *_sampled_accuracy(model, g, test_nid, fanouts, args.eval_batch_size)],
                       dtype=torch.float64)
    torch.distributed.all_reduce(acc)
    sampled_eval_s = time.perf_counter() - t0
    full: dict[str, float] = {}
    full_s = float("nan")
    if args.full_inference:
        t0 = time.perf_counter()
        logits = _full_inference(model, g, args.eval_batch_size)
        for split, nid in (("val", val_nid), ("test", test_nid)):
            hit = torch.tensor([int((logits[nid].argmax(1) == g.ndata["label"][nid]).sum()),
                                len(nid)], dtype=torch.float64)
            torch.distributed.all_reduce(hit)
            full[f"{split}_acc_full"] = float(hit[0] / hit[1])
        full_s = time.perf_counter() - t0
    result = {
        "epochs": epochs,
        "summary": {
            "val_acc_sampled": float(acc[0] / acc[1]),
            "test_acc_sampled": float(acc[2] / acc[3]),
            **full,
            "setup_s": setup_s, "sampled_eval_s": sampled_eval_s, "full_inference_s": full_s,
            "train_nodes_per_rank": len(train_nid), "local_nodes": len(local),
            "steps_per_epoch": epochs[-1]["steps"], "world_size": world,
            "fanouts_dgl_order": fanouts, "dgl": dgl.__version__, "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
        },
    }
    if rank == 0:
        tmp = Path(args.result + ".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(args.result)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    # dgl's atexit hook (exit_client) shuts the servers down once every trainer is done.


def main() -> None:
    """Dispatch ``partition`` / ``serve`` / ``train``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("partition", allow_abbrev=False)
    s.add_argument("--dataset", required=True)
    s.add_argument("--name", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--num-parts", type=int, default=2)
    sub.add_parser("serve", allow_abbrev=False)
    s = sub.add_parser("train", allow_abbrev=False)
    s.add_argument("--ip-config", required=True)
    s.add_argument("--name", required=True)
    s.add_argument("--part-config", required=True)
    s.add_argument("--num-classes", type=int, required=True)
    s.add_argument("--fanouts", default="10,15", help="DGL order: input layer first")
    s.add_argument("--batch-size", type=int, default=1024)
    s.add_argument("--eval-batch-size", type=int, default=4096)
    s.add_argument("--epochs", type=int, default=3)
    s.add_argument("--hidden", type=int, default=256)
    s.add_argument("--dropout", type=float, default=0.5)
    s.add_argument("--lr", type=float, default=0.003)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--full-inference", action=argparse.BooleanOptionalAction, default=True)
    s.add_argument("--result", required=True)
    s = sub.add_parser("step", allow_abbrev=False)
    s.add_argument("--batches", required=True, help=".npz written by bench_step.py")
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--hidden", type=int, default=256)
    s.add_argument("--classes", type=int, required=True)
    s.add_argument("--dropout", type=float, default=0.5)
    s.add_argument("--lr", type=float, default=0.003)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--result", required=True)
    s = sub.add_parser("sample", allow_abbrev=False)
    s.add_argument("--dataset", required=True)
    s.add_argument("--fanouts", default="10,15", help="DGL order: input layer first")
    s.add_argument("--batch-size", type=int, default=1024)
    s.add_argument("--batches", type=int, default=30)
    s.add_argument("--warmup", type=int, default=3)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--result", required=True)
    args = p.parse_args()
    {"partition": cmd_partition, "serve": cmd_serve, "train": cmd_train, "step": cmd_step,
     "sample": cmd_sample}[args.cmd](args)


if __name__ == "__main__":
    main()
