"""CUDA against CPU: the same samples, the same rows, the same layers, the same accuracy.

``gpu`` tests (skipped without a CUDA device; ``benchmarks/gpu_check.sh`` runs them):
each check runs the same worker twice through :func:`gnnpar.testing.run_multiproc`, once
pinned to the CPU (gloo) and once to the GPUs (NCCL, one per rank), and compares.

Determinism per device: sampling is counter-based integer arithmetic, and gathered rows
are copies, so samples, feature rows and labels are bitwise equal on CPU and CUDA.
Floating-point layers are not: cuSPARSE and cuBLAS sum in another order (and use
atomics), so halo-exchange layer outputs are compared to a tolerance and training to
accuracy (within 1 point).  Bitwise run-to-run reproducibility (resume) is claimed on
the CPU only.  World size 1 needs one GPU; the 2-rank variants need two
(``multigpu(2)``) and exercise NCCL's all-to-all.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gnnpar.datasets.synthetic import sbm
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc

pytestmark = pytest.mark.gpu
FANOUTS = [10, 5]
WORLDS = [1, pytest.param(2, marks=pytest.mark.multigpu(2))]


def _np(t: Any) -> np.ndarray:
    """A tensor on any device as a numpy array (copied to the host)."""
    return t.detach().cpu().numpy()


def _sampler(graph: Any, ctx: Any, fanouts: Any, seed: int = 0, **kw: Any) -> Any:
    """The sampler of ``fanouts`` (validated and capped: collective), typed on a typed graph."""
    from gnnpar.sampling.fanouts import Fanouts
    from gnnpar.sampling.neighbor import DistNeighborSampler
    from gnnpar.sampling.typed import DistTypedNeighborSampler

    fan = Fanouts.for_graph(fanouts, graph, ctx)
    if graph.meta.types is not None:
        return DistTypedNeighborSampler(graph, ctx, fan, seed=seed, **kw)
    return DistNeighborSampler(graph, ctx, fan, seed=seed, **kw)


def _loader_worker(part_dir: str, n_batches: int) -> dict[str, Any]:
    """The first batches of a shuffled, prefetching loader, from each feature placement."""
    import gnnpar

    ctx = gnnpar.init()
    graph = gnnpar.DistGraph.load(part_dir, ctx)
    out: dict[str, Any] = {"device": str(ctx.device)}
    stores = {"default": gnnpar.DistFeatureStore(graph, ctx, cache_bytes=2**16),
              "pinned": gnnpar.DistFeatureStore(graph, ctx, device_budget_bytes=0)}
    for name, store in stores.items():
        loader = gnnpar.DistNeighborLoader(_sampler(graph, ctx, FANOUTS, seed=3), store,
                                           "train", batch_size=128, shuffle=True,
                                           prefetch=True)
        batches = []
        for i, b in enumerate(loader):
            batches.append({"n_id": _np(b.n_id), "edge_index": _np(b.edge_index),
                            "x": _np(b.x), "y": _np(b.y),
                            "nodes": list(b.num_sampled_nodes)})
            if i + 1 == n_batches:
                break
        out[name] = {"placement": store.placement, "batches": batches}
    gnnpar.shutdown()
    return out


def _halo_worker(part_dir: str) -> dict[str, Any]:
    """Logits of a fixed GraphSAGE and GCN on the whole graph through halo exchange."""
    import torch
    from torch_geometric.nn.models import GCN, GraphSAGE

    import gnnpar
    from gnnpar.nn.dist_conv import HaloGraph, distribute_convs

    ctx = gnnpar.init()
    graph = gnnpar.DistGraph.load(part_dir, ctx)
    halo = HaloGraph.build(graph, ctx)
    x = graph.features().to(ctx.device, torch.float32)
    out: dict[str, Any] = {"device": str(ctx.device), "orig_ids": np.array(graph.part.orig_ids)}
    for name, cls in (("sage", GraphSAGE), ("gcn", GCN)):
        torch.manual_seed(0)
        model = distribute_convs(cls(graph.meta.feat_dim, 32, 2, 4).to(ctx.device), halo)
        with torch.no_grad():
            out[name] = _np(model(x, halo.edge_index))
    gnnpar.shutdown()
    return out


def _grid_worker(part_dir: str) -> dict[str, Any]:
    """Logits of a fixed GraphSAGE and GCN on 3D-parallel layers, grid (world, 1, 1)."""
    import torch

    import gnnpar
    from gnnpar.models.node import build_model
    from gnnpar.nn.grid import ProcessGrid
    from gnnpar.nn.grid_gnn import GridGNN, GridGraph, model_kind
    from gnnpar.parallel_dims import ParallelDims
    from gnnpar.train.config import ModelConfig

    ctx = gnnpar.init()
    graph = gnnpar.DistGraph.load(part_dir, ctx)
    out: dict[str, Any] = {"device": str(ctx.device)}
    for name in ("sage", "gcn"):
        torch.manual_seed(0)
        model = build_model(ModelConfig(name=name, hidden=32, layers=2, dropout=0.0),
                            graph.meta.feat_dim, graph.meta.num_classes).to(ctx.device)
        grid = ProcessGrid.build(ParallelDims(ctx, grid=(ctx.world_size, 1, 1)), 2)
        layout = GridGraph.build(graph, ctx, grid, model_kind(model),
                                 (graph.meta.feat_dim, 32, graph.meta.num_classes))
        with torch.no_grad():
            out[name] = _np(GridGNN(model, layout)(layout.x))
    gnnpar.shutdown()
    return out


def _typed_worker(part_dir: str) -> dict[str, Any]:
    """Typed batches (every type's features from one store) and two SparseAdam steps."""
    import torch

    import gnnpar
    from gnnpar.loading.typed import DistTypedNeighborLoader
    from gnnpar.storage.embedding import DistEmbedding, SparseAdam
    from gnnpar.storage.typed import TypedFeatureStore

    ctx = gnnpar.init()
    graph = gnnpar.DistGraph.load(part_dir, ctx)
    labels = gnnpar.DistFeatureStore(graph, ctx, arrays={"y": graph.part.label})
    sampler = _sampler(graph, ctx, {"cites": [4, 2], "writes": [3, 2], "rev_writes": [2, 2],
                                    "published_in": [1, 1], "rev_published_in": [3, 0]})
    loader = DistTypedNeighborLoader(sampler, labels, TypedFeatureStore(graph, ctx),
                                      "train", batch_size=64, prefetch=True)
    emb = DistEmbedding(graph, ctx, 8, (1, 2))
    opt = SparseAdam([emb], lr=0.1)
    batches = []
    for i, b in enumerate(loader):
        batches.append({**{f"n_id/{t}": _np(b[t].n_id) for t in b.node_types},
                        **{f"ei/{'__'.join(r)}": _np(b[r].edge_index) for r in b.edge_types},
                        "x": _np(b["paper"].x), "y": _np(b["paper"].y)})
        if i < 2:
            rows = emb(b["author"].n_id, b["author"].num_owned_nodes,
                       b["author"].num_sampled_nodes)
            (rows.sum(1) * torch.arange(rows.shape[0], device=rows.device)).sum().backward()
            opt.step()
        if i == 3:
            break
    out = {"device": str(ctx.device), "batches": batches, "weight": _np(emb.weight)}
    gnnpar.shutdown()
    return out


@pytest.mark.parametrize("world", WORLDS)
def test_cuda_typed_batches_and_embeddings_equal_cpu(tmp_path: Path, world: int) -> None:
    from gnnpar.datasets.synthetic import typed

    partition_graph(typed(num_papers=2000, num_authors=1000, num_venues=40), tmp_path / "typed",
                    PartitionConfig(num_parts=world))
    cpu = run_multiproc(_typed_worker, world, str(tmp_path / "typed"), device="cpu")
    cuda = run_multiproc(_typed_worker, world, str(tmp_path / "typed"), device="cuda")
    for r in range(world):
        assert cuda[r]["device"] == f"cuda:{r}"
        for a, b in zip(cpu[r]["batches"], cuda[r]["batches"], strict=True):
            assert a.keys() == b.keys()
            for key in a:
                assert np.array_equal(a[key], b[key]), key
        np.testing.assert_allclose(cuda[r]["weight"], cpu[r]["weight"], rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    root = tmp_path_factory.mktemp("gpu")
    ds = sbm(num_nodes=6000, avg_degree=10, num_classes=4, feat_dim=16, seed=1)
    for k in (1, 2):
        partition_graph(ds, root / f"k{k}", PartitionConfig(num_parts=k, seed=0))
    return {k: str(root / f"k{k}") for k in (1, 2)}


@pytest.mark.parametrize("world", WORLDS)
def test_cuda_samples_and_rows_equal_cpu(parts: dict[int, str], world: int) -> None:
    cpu = run_multiproc(_loader_worker, world, parts[world], 4, device="cpu")
    cuda = run_multiproc(_loader_worker, world, parts[world], 4, device="cuda")
    for r in range(world):
        assert cpu[r]["device"] == "cpu" and cuda[r]["device"] == f"cuda:{r}"
        assert cuda[r]["default"]["placement"] == "device"
        assert cuda[r]["pinned"]["placement"] == "pinned"
        want = cpu[r]["default"]["batches"]
        assert len(want) == 4
        for store in ("default", "pinned"):
            got = cuda[r][store]["batches"]
            for a, b in zip(want, got, strict=True):
                assert a["nodes"] == b["nodes"]
                for key in ("n_id", "edge_index", "x", "y"):
                    assert np.array_equal(a[key], b[key]), (store, key)


@pytest.mark.parametrize("world", WORLDS)
def test_cuda_halo_layers_equal_cpu(parts: dict[int, str], world: int) -> None:
    cpu = run_multiproc(_halo_worker, world, parts[world], device="cpu")
    cuda = run_multiproc(_halo_worker, world, parts[world], device="cuda")
    for r in range(world):
        assert np.array_equal(cpu[r]["orig_ids"], cuda[r]["orig_ids"])
        for name in ("sage", "gcn"):
            np.testing.assert_allclose(cuda[r][name], cpu[r][name], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("world", WORLDS)
def test_cuda_grid_layers_equal_cpu(parts: dict[int, str], world: int) -> None:
    cpu = run_multiproc(_grid_worker, world, parts[world], device="cpu")
    cuda = run_multiproc(_grid_worker, world, parts[world], device="cuda")
    for r in range(world):
        assert cuda[r]["device"] == f"cuda:{r}"
        for name in ("sage", "gcn"):
            np.testing.assert_allclose(cuda[r][name], cpu[r][name], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("world", WORLDS)
def test_nccl_only_group_gets_only_device_tensors(parts: dict[int, str], tmp_path: Path,
                                                  world: int) -> None:
    from tests.test_caller_group import caller_group_worker

    ranks = run_multiproc(caller_group_worker, world, parts[world], str(tmp_path), "nccl",
                          device="cuda")
    for rank, r in enumerate(ranks):
        assert r["backend"] == "nccl" and r["device"] == f"cuda:{rank}"
        for name, devices, same_thread in r["collectives"]:
            assert devices == [f"cuda:{rank}"], (name, devices)
            # DDP's all-reduce is issued from autograd's device thread during backward,
            # while the main thread waits in backward(): still one thread at a time.
            assert same_thread or name == "allreduce_", name


def _budget_worker(parts: dict[str, str]) -> dict[str, Any]:
    """Steady batches of each loader, a training step and an embedding step, each counted
    as CUDA counts host synchronisations (``set_sync_debug_mode``), and their collectives."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    import gnnpar
    from gnnpar.loading.typed import DistTypedNeighborLoader
    from gnnpar.models.node import SampledGNN, build_model, forward_batch
    from gnnpar.shadow import CollectiveLog
    from gnnpar.storage.embedding import DistEmbedding, SparseAdam
    from gnnpar.storage.typed import TypedFeatureStore
    from gnnpar.train.config import ModelConfig

    ctx = gnnpar.init()
    out: dict[str, Any] = {"device": str(ctx.device)}
    log = CollectiveLog()

    def steady(loader: Any, name: str, after: Any = None) -> None:
        it = iter(loader)
        next(it)
        counts = []
        for _ in range(min(3, len(loader) - 1)):
            with log, _cuda_syncs(ctx.device) as found:
                batch = next(it)
                if after is not None:
                    after(batch)
            counts.append(len(found))
        out[name] = counts

    graph = gnnpar.DistGraph.load(parts["node"], ctx)
    for name, kw in (("node", {}), ("pinned", {"device_budget_bytes": 0})):
        steady(gnnpar.DistNeighborLoader(_sampler(graph, ctx, FANOUTS),
                                         gnnpar.DistFeatureStore(graph, ctx, **kw), "train",
                                         batch_size=64, prefetch=True), name)
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden=16), graph.meta.feat_dim,
                        graph.meta.num_classes).to(ctx.device)
    ddp = DistributedDataParallel(SampledGNN(model))
    loader = gnnpar.DistNeighborLoader(_sampler(graph, ctx, FANOUTS),
                                       gnnpar.DistFeatureStore(graph, ctx), "train",
                                       batch_size=64, prefetch=True)
    steps = []
    for batch in loader:
        with log, _cuda_syncs(ctx.device) as found:
            F.cross_entropy(forward_batch(ddp, batch), batch.y[: batch.batch_size]).backward()
        steps.append(len(found))
    out["step"] = steps[1:]
    link = gnnpar.DistGraph.load(parts["link"], ctx)
    steady(gnnpar.DistLinkNeighborLoader(
        _sampler(link, ctx, FANOUTS, with_edges=True),
        gnnpar.DistFeatureStore(link, ctx, arrays={"x": link.features()}), "train",
        batch_size=64, prefetch=True), "link")
    kinds = gnnpar.DistGraph.load(parts["typed"], ctx)
    labels = gnnpar.DistFeatureStore(kinds, ctx, arrays={"y": kinds.part.label})
    typed_loader = DistTypedNeighborLoader(_sampler(kinds, ctx, FANOUTS), labels,
                                            TypedFeatureStore(kinds, ctx), "train",
                                            batch_size=64, prefetch=True)
    emb = DistEmbedding(kinds, ctx, 8, (1, 2))
    opt = SparseAdam([emb], lr=0.1)
    steady(typed_loader, "typed")
    batch = next(iter(typed_loader))
    with log, _cuda_syncs(ctx.device) as found:
        a = batch["author"]
        emb(a.n_id, a.num_owned_nodes, a.num_sampled_nodes).square().sum().backward()
        opt.step()
    out["embedding"] = [len(found)]
    out["collectives"] = [(n, list(d), t == threading.get_ident())
                          for n, d, t in log.entries]
    gnnpar.shutdown()
    return out


@contextlib.contextmanager
def _cuda_syncs(device: Any) -> Iterator[list[str]]:
    """The synchronising CUDA calls made inside, as CUDA itself reports them (none on a
    CPU, where the workers can be dry-run)."""
    import torch

    found: list[str] = []
    if device.type != "cuda":
        yield found
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield found
        finally:
            torch.cuda.set_sync_debug_mode("default")
    found += [str(w.message) for w in caught if "synchroniz" in str(w.message)]


@pytest.mark.parametrize("world", WORLDS)
def test_budgets_hold_on_cuda(tmp_path: Path, world: int) -> None:
    """The device shadow's budgets, as CUDA counts them (``gpu_check.sh`` runs world 1 with
    ``GNNPAR_FORCE_COLLECTIVES=1``: NCCL's collectives run at one rank too)."""
    from dataclasses import replace

    from gnnpar.datasets.synthetic import typed
    from gnnpar.loading.link import HOST_SYNCS as LINK
    from gnnpar.loading.node import HOST_SYNCS as NODE
    from gnnpar.loading.typed import HOST_SYNCS as TYPED
    from gnnpar.storage.embedding import HOST_SYNCS as EMBEDDING

    graphs = {"node": sbm(num_nodes=2000, avg_degree=8, num_classes=4, feat_dim=8, seed=0),
              "link": sbm(num_nodes=1500, seed=0, task="link"),
              "typed": typed(num_papers=800, num_authors=400, num_venues=24)}
    graphs["link"] = replace(graphs["link"], edge_attr=np.ones(
        (graphs["link"].num_edges, 2), dtype=np.float32))
    for name, ds in graphs.items():
        partition_graph(ds, tmp_path / name, PartitionConfig(num_parts=world),
                        **({"task": "link"} if name == "link" else {}))
    parts = {name: str(tmp_path / name) for name in graphs}
    for rank, r in enumerate(run_multiproc(_budget_worker, world, parts, device="cuda")):
        budget = {"node": NODE, "pinned": NODE, "step": 0, "link": LINK, "typed": TYPED,
                  "embedding": EMBEDDING}
        for name, most in budget.items():
            assert max(r[name]) <= most, (name, r[name])
        for name, devices, same_thread in r["collectives"]:
            assert devices == [f"cuda:{rank}"], (name, devices)
            assert same_thread or name == "allreduce_", name
        if world == 1 and os.environ.get("GNNPAR_FORCE_COLLECTIVES") == "1":
            names = {n for n, _, _ in r["collectives"]}
            assert {"alltoall_base_", "_allgather_base_", "allreduce_"} <= names, names


def _collectives_worker(part_dir: str) -> dict[str, Any]:
    """Each collective path once: packed uint8 rows (x and y), bf16 rows, empty splits,
    count all-gathers, halo and grid exchanges forward and backward."""
    import torch

    import gnnpar
    from gnnpar.comm import all_gather_counts, start_all_to_all_v
    from gnnpar.models.node import build_model
    from gnnpar.nn.dist_conv import HaloGraph, distribute_convs
    from gnnpar.nn.grid import ProcessGrid
    from gnnpar.nn.grid_gnn import GridGNN, GridGraph, model_kind
    from gnnpar.parallel_dims import ParallelDims
    from gnnpar.shadow import CollectiveLog
    from gnnpar.train.config import ModelConfig

    ctx = gnnpar.init()
    graph = gnnpar.DistGraph.load(part_dir, ctx)
    out: dict[str, Any] = {"device": str(ctx.device)}
    with CollectiveLog() as log:
        ids = torch.arange(ctx.rank, graph.meta.num_nodes, 3, device=ctx.device)
        rows = gnnpar.DistFeatureStore(graph, ctx).gather_many(ids)  # packed x and y
        out["x"], out["y"] = _np(rows["x"]), _np(rows["y"])
        bf16 = gnnpar.DistFeatureStore(graph, ctx, arrays={
            "x": graph.features().to(torch.bfloat16)}).gather(ids)
        out["bf16"] = _np(bf16.float())
        empty = start_all_to_all_v(ctx, torch.zeros((0, 4), device=ctx.device),
                                   [0] * ctx.world_size, [0] * ctx.world_size).wait()
        out["empty"] = tuple(empty.shape)
        out["counts"] = all_gather_counts(ctx, torch.tensor([ctx.rank + 1],
                                                            device=ctx.device))[1]
        torch.manual_seed(0)
        halo = HaloGraph.build(graph, ctx)
        sage = distribute_convs(build_model(ModelConfig(hidden=16), graph.meta.feat_dim,
                                            graph.meta.num_classes).to(ctx.device), halo)
        x = graph.features().to(ctx.device, torch.float32).requires_grad_(True)
        sage(x, halo.edge_index).square().sum().backward()
        out["halo_grad"] = _np(x.grad)
        torch.manual_seed(0)
        model = build_model(ModelConfig(name="gcn", hidden=16, dropout=0.0),
                            graph.meta.feat_dim, graph.meta.num_classes).to(ctx.device)
        grid = ProcessGrid.build(ParallelDims(ctx, grid=(ctx.world_size, 1, 1)), 2)
        layout = GridGraph.build(graph, ctx, grid, model_kind(model),
                                 (graph.meta.feat_dim, 16, graph.meta.num_classes))
        logits = GridGNN(model, layout)(layout.x)
        logits.square().sum().backward()  # the adjoint collectives too
        out["grid_out"] = _np(logits)
    out["collectives"] = sorted({(n, *d) for n, d, _ in log.entries})
    gnnpar.shutdown()
    return out


def test_collective_paths_on_nccl_equal_gloo(parts: dict[int, str]) -> None:
    """At world size 1 with ``GNNPAR_FORCE_COLLECTIVES=1`` (what gpu_check.sh sets): every
    collective path runs through NCCL, and gives what gloo gives on the CPU."""
    env = {"GNNPAR_FORCE_COLLECTIVES": "1"}
    cpu = run_multiproc(_collectives_worker, 1, parts[1], device="cpu", env=env)[0]
    cuda = run_multiproc(_collectives_worker, 1, parts[1], device="cuda", env=env)[0]
    names = {c[0] for c in cuda["collectives"]}
    assert {"alltoall_base_", "_allgather_base_", "allreduce_"} <= names, names
    assert all(c[1:] == ("cuda:0",) for c in cuda["collectives"]), cuda["collectives"]
    for key in ("x", "y", "bf16"):
        assert np.array_equal(cpu[key], cuda[key]), key
    assert cuda["empty"] == (0, 4) and cuda["counts"] == [[1]]
    for key in ("halo_grad", "grid_out"):
        np.testing.assert_allclose(cuda[key], cpu[key], rtol=1e-4, atol=1e-5)


def _train(work: Path, device: str, mode: str) -> dict[str, Any]:
    exe = shutil.which("gnnpar-train")
    cmd = [exe] if exe else [sys.executable, "-m", "gnnpar.train"]
    flags = ["--epochs", "4"] if mode == "sample" else ["--epochs", "60", "--lr", "0.02"]
    out = work / f"{mode}-{device}"
    proc = subprocess.run(
        [*cmd, "synthetic:sbm?nodes=10000&feat_dim=32&classes=8&seed=5&homophily=0.6",
         "--nproc", "1", "--device", device, "--mode", mode, *flags, "--hidden", "64",
         "--no-progress", "--root", str(work / "data"), "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record: dict[str, Any] = json.loads((out / "record.json").read_text())
    return record


@pytest.mark.parametrize("mode", ["sample", "full"])
def test_cuda_training_within_one_point_of_cpu(tmp_path: Path, mode: str) -> None:
    cpu, cuda = _train(tmp_path, "cpu", mode), _train(tmp_path, "cuda", mode)
    assert cuda["env"]["backend"] == "nccl" and cuda["env"]["device"].startswith("cuda")
    assert cpu["summary"]["test_acc"] > 0.5
    assert abs(cuda["summary"]["test_acc"] - cpu["summary"]["test_acc"]) <= 0.01


def _link_worker(part_dir: str, n_batches: int) -> dict[str, Any]:
    """Link batches (strict negatives, targets hidden, edge ids and features) and the
    exact metrics of a fixed encoder."""
    import torch

    import gnnpar
    from gnnpar.evaluation.link import embeddings, link_metrics
    from gnnpar.models.link import LinkDecoder
    from gnnpar.models.node import build_model
    from gnnpar.train.config import ModelConfig

    ctx = gnnpar.init()
    graph = gnnpar.DistGraph.load(part_dir, ctx)
    store = gnnpar.DistFeatureStore(graph, ctx)
    loader = gnnpar.DistLinkNeighborLoader(_sampler(graph, ctx, FANOUTS, seed=3,
                                                    with_edges=True), store, "train",
                                           batch_size=64, num_neg=2, strict=True,
                                           prefetch=True)
    batches = []
    for i, b in enumerate(loader):
        batches.append({k: _np(getattr(b, k)) for k in (
            "n_id", "edge_index", "e_id", "edge_attr", "x", "edge_label_index", "edge_label")})
        if i + 1 == n_batches:
            break
    torch.manual_seed(0)
    gnn = build_model(ModelConfig(hidden=16), graph.meta.feat_dim, 16).to(ctx.device)
    h = embeddings(gnn, graph, ctx, budget_bytes=1 << 20)
    metrics = link_metrics(h, LinkDecoder("dot", 16).to(ctx.device), graph, ctx)
    gnnpar.shutdown()
    return {"device": str(ctx.device), "batches": batches, "metrics": metrics}


@pytest.fixture(scope="module")
def link_parts(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    from dataclasses import replace

    root = tmp_path_factory.mktemp("gpu-link")
    ds = sbm(num_nodes=4000, seed=1, task="link")
    rng = np.random.default_rng(0)
    ds = replace(ds, edge_attr=rng.standard_normal((ds.num_edges, 3)).astype(np.float32))
    for k in (1, 2):
        partition_graph(ds, root / f"k{k}", PartitionConfig(num_parts=k, seed=0))
    return {k: str(root / f"k{k}") for k in (1, 2)}


@pytest.mark.parametrize("world", WORLDS)
def test_cuda_link_batches_and_metrics_equal_cpu(link_parts: dict[int, str],
                                                 world: int) -> None:
    cpu = run_multiproc(_link_worker, world, link_parts[world], 3, device="cpu")
    cuda = run_multiproc(_link_worker, world, link_parts[world], 3, device="cuda")
    for r in range(world):
        assert cuda[r]["device"] == f"cuda:{r}"
        for a, b in zip(cpu[r]["batches"], cuda[r]["batches"], strict=True):
            for key, value in a.items():  # counter-based negatives and samples: bitwise
                assert np.array_equal(value, b[key]), key
        for key, value in cpu[r]["metrics"].items():
            assert cuda[r]["metrics"][key] == pytest.approx(value, abs=1e-3), key
