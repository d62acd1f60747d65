"""The device shadow: CUDA's rules on the CPU, and every hot path held to its host-read budget.

:class:`gnnpar.shadow.DeviceShadow` runs gnnpar's device code path on the CPU and fails on
what CUDA would refuse (mixed devices, a host tensor in a collective, a side-stream tensor
used before its hand-over) or wait for (host reads of device values).  The first tests show
it catching each on small hand-made cases, including the pattern that broke every sampled
CUDA run before (a partition book left on the host, looked up with device ids).  The rest
run every loader, engine and mode on 2 gloo ranks under it and hold each to the budget
declared next to it:

==========================  =================================================
what (2 hops, 2 ranks)      budget (host reads)
==========================  =================================================
node batch                  ``gnnpar.loading.node.HOST_SYNCS`` (5): device, pinned,
                            cached; pinned-host: ``host_syncs(2, "pinned-host")`` (10)
link batch                  ``gnnpar.loading.link.host_syncs`` (7; strict 10)
typed batch                 ``gnnpar.loading.typed.HOST_SYNCS`` (5), any featured types
embedding gather + update   ``gnnpar.storage.embedding.HOST_SYNCS`` (4)
training step               ``gnnpar.train.trainer.STEP_HOST_SYNCS`` (0)
full-graph / grid epoch     ``gnnpar.train.fullgraph.EPOCH_HOST_SYNCS`` (2)
==========================  =================================================

Every collective of those runs is issued by the thread that runs the step (NCCL's rule).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gnnpar.datasets.synthetic import sbm, typed
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.shadow import DeviceShadow, DeviceShadowError
from gnnpar.testing import run_multiproc

FANOUTS = [10, 5]


def _sampler(graph: Any, ctx: Any, fanouts: Any = FANOUTS, **kw: Any) -> Any:
    """The sampler of ``fanouts`` (validated and capped: collective), typed on a typed graph."""
    from gnnpar.sampling.fanouts import Fanouts
    from gnnpar.sampling.neighbor import DistNeighborSampler
    from gnnpar.sampling.typed import DistTypedNeighborSampler

    fan = Fanouts.for_graph(fanouts, graph, ctx)
    if graph.meta.types is not None:
        return DistTypedNeighborSampler(graph, ctx, fan, **kw)
    return DistNeighborSampler(graph, ctx, fan, **kw)


# ---------------------------------------------------------------------- the shadow itself
@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shadow-tiny")
    partition_graph(sbm(num_nodes=300, avg_degree=6, num_classes=3, feat_dim=4, seed=0),
                    root / "p", PartitionConfig(num_parts=2))
    return root / "p"


def test_catches_a_host_partition_book_looked_up_with_device_ids(tiny: Path) -> None:
    """The pre-fix feature store kept the host graph and called owner() with device ids."""
    from gnnpar.partition.format import load_partition
    from gnnpar.storage.graph import DistGraph

    part = load_partition(tiny, 0)
    with DeviceShadow() as shadow:
        ids = torch.arange(0, 300, 7, device=shadow.device)
        host_book = DistGraph.from_partition(part)  # the old placement: host tensors
        with pytest.raises(DeviceShadowError, match="searchsorted mixes a device tensor"):
            host_book.owner(ids)
        book = DistGraph.from_partition(part, shadow.device)  # where a run now puts it
        owners = book.owner(ids)
    offsets = np.asarray(part.meta.offsets)
    want = np.searchsorted(offsets, np.arange(0, 300, 7), side="right") - 1
    assert np.array_equal(owners.numpy(), want)


def test_counts_host_reads_of_device_values_only() -> None:
    with DeviceShadow() as shadow:
        d = torch.tensor([3, 1, 3, 0], device=shadow.device)  # a blocking upload: 1
        h = torch.tensor([3, 1, 3, 0])
        with shadow.window() as w:
            int(d.max())                                      # 1
            d.tolist()                                        # 1
            torch.unique(d)                                   # 1
            torch.bincount(d)                                 # 2: CUDA's min and max
            _ = d[d > 0]                                      # 1
            torch.repeat_interleave(d)                        # 1
            torch.repeat_interleave(d, d, output_size=7)      # 0: the size is given
            torch.nonzero_static(d > 0, size=3)               # 0
            d.to("cpu", non_blocking=True)                    # 0: pending until a sync
            int(h.max()), h.tolist(), torch.unique(h), torch.bincount(h)  # host: 0
    assert w.num_syncs == 7, w.sites
    assert w.syncs["bincount (min and max)"] == 2


def test_catches_mixing_pending_copies_and_blocking_uploads() -> None:
    with DeviceShadow() as shadow:
        d = torch.arange(4, device=shadow.device)
        with pytest.raises(DeviceShadowError, match="mixes a device tensor with a host"):
            d + torch.arange(4)
        d + torch.tensor(1)  # a 0-dim host tensor is a scalar to CUDA: allowed
        pending = d.to("cpu", non_blocking=True)
        with pytest.raises(DeviceShadowError, match="before any synchronisation"):
            pending.sum()
        int(d[0])  # a synchronisation completes the copy
        assert int(pending.sum()) == 6
        with shadow.window() as w:
            torch.arange(4).to(shadow.device)                       # pageable: blocking
            torch.arange(4).pin_memory().to(shadow.device, non_blocking=True)  # async
        assert w.num_syncs == 1, w.sites
        assert d.device == shadow.device and torch.arange(2).device.type == "cpu"


def test_catches_a_side_stream_tensor_used_before_its_hand_over() -> None:
    from gnnpar.device import BatchStream

    with DeviceShadow() as shadow:
        stream = BatchStream(shadow.device)
        with stream:
            made = torch.arange(4, device=shadow.device) * 2
        with pytest.raises(DeviceShadowError, match="after the compute stream last waited"):
            made + 1
        stream.hand_over([made])
        assert int((made + 1).sum()) == 16
        with stream:
            later = made * 3  # side-stream work after the hand-over
        stream.hand_over([])
        with pytest.raises(DeviceShadowError, match="not handed over"):
            later + 1


def _collective_worker(force: bool, part_dir: str) -> dict[str, Any]:
    import gnnpar
    from gnnpar.comm import all_reduce_sum
    from gnnpar.distributed import FORCE_COLLECTIVES

    if force:
        os.environ[FORCE_COLLECTIVES] = "1"
    else:
        os.environ.pop(FORCE_COLLECTIVES, None)
    with DeviceShadow() as shadow:
        ctx = gnnpar.init(device=shadow.device)
        if force:  # world size 1 with the switch on: the collectives run
            try:
                all_reduce_sum(ctx, torch.ones(3))
                host_ok = True
            except DeviceShadowError:
                host_ok = False
        else:
            host_ok = None
        graph = gnnpar.DistGraph.load(part_dir, ctx)
        loader = gnnpar.DistNeighborLoader(_sampler(graph, ctx),
                                           gnnpar.DistFeatureStore(graph, ctx), "train",
                                           batch_size=32)
        with shadow.window() as w:
            next(iter(loader))
    return {"host_ok": host_ok, "collectives": [n for n, _ in w.collectives],
            "syncs": w.num_syncs}


def _collective_workers(part_dir: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`_collective_worker` with the switch on, then off, on one rank."""
    try:
        return _collective_worker(True, part_dir), _collective_worker(False, part_dir)
    finally:
        import gnnpar

        gnnpar.shutdown()


def test_one_rank_runs_its_collectives_under_the_switch(tmp_path: Path) -> None:
    """``GNNPAR_FORCE_COLLECTIVES=1`` keeps every collective at world size 1 (gpu_check.sh's
    NCCL check on one GPU); without it a world of one skips them."""
    partition_graph(sbm(num_nodes=300, avg_degree=6, num_classes=3, feat_dim=4, seed=0),
                    tmp_path / "p1", PartitionConfig(num_parts=1))
    forced, skipped = run_multiproc(_collective_workers, 1, str(tmp_path / "p1"))[0]
    assert forced["host_ok"] is False  # a host tensor in a real collective: caught
    # Per hop the count all-gather (nothing to request from oneself); the features:
    # counts, ids, rows.
    assert forced["collectives"].count("alltoall_base_") == 3, forced  # features
    assert forced["collectives"].count("_allgather_base_") == 2, forced
    assert skipped["collectives"] == [] and skipped["syncs"] == forced["syncs"]


# ---------------------------------------------------------------------- the budgets
def _windows(shadow: Any) -> tuple[Any, list[tuple[int, int, int, list[Any]]]]:
    """A step hook whose windows each span one steady step (next batch + training step)."""
    state: dict[str, Any] = {}
    steps: list[tuple[int, int, int, list[Any]]] = []

    def hook(epoch: int, step: int, batch: Any) -> None:
        cm = state.pop("cm", None)
        if cm is not None:
            w = state.pop("w")
            cm.__exit__(None, None, None)
            if state.pop("at") == (epoch, step - 1):  # not across an epoch's end
                steps.append((epoch, step, w.num_syncs, sorted(set(w.sites))))
        cm = shadow.window()
        state.update(cm=cm, w=cm.__enter__(), at=(epoch, step))

    def close() -> None:
        if "cm" in state:
            state.pop("cm").__exit__(None, None, None)

    hook.close = close  # type: ignore[attr-defined]
    return hook, steps


def _train(shadow: Any, ctx: Any, part_dir: str, out: str, settings: dict[str, Any]
           ) -> dict[str, Any]:
    """Train under the shadow: steady steps' reads, epoch windows, collectives' threads."""

    from gnnpar.train.config import Config, ModelConfig
    from gnnpar.train.trainer import Trainer
    from tests.helpers.workers import configure, small_config

    # No log line inside a measured step: its one read per interval is outside the step's
    # budget (gnnpar.train.trainer.STEP_HOST_SYNCS).
    quiet = {"log_every": 10**9}
    if settings.get("mode") == "full":
        cfg = configure(Config(model=ModelConfig(hidden=16)),
                        **{"out": out, "progress": False, "epochs": 2, **quiet, **settings})
    else:
        cfg = small_config(out, **{"hidden": 16, **quiet, **settings})
    trainer = Trainer(cfg, part_dir, ctx)
    epochs: list[int] = []
    engine = trainer.engine
    train_epoch = trainer._train_epoch

    def counted(*args: Any, **kwargs: Any) -> Any:
        with shadow.window() as w:
            sums = train_epoch(*args, **kwargs)
        epochs.append(w.num_syncs)
        return sums

    trainer._train_epoch = counted  # type: ignore[method-assign]
    hook, steps = _windows(shadow)
    main = threading.get_ident()
    with shadow.window() as whole:
        trainer.fit(hook)
    hook.close()  # type: ignore[attr-defined]
    index = Path(out) / "predictions" / "index.json"
    return {"steps": steps, "epochs": epochs, "steps_per_epoch": engine.steps_per_epoch,
            "threads": sorted({t == main for _, t in whole.collectives}),
            "outputs": sorted(json.loads(index.read_text())["arrays"]) if index.is_file()
            else []}


def _loader_reads(shadow: Any, loader: Any, batches: int = 3) -> list[tuple[int, Any]]:
    """Host reads of steady batches (the first one of an epoch uploads its order)."""
    it = iter(loader)
    next(it)
    out = []
    for _ in range(min(batches, len(loader) - 1)):
        with shadow.window() as w:
            next(it)
        out.append((w.num_syncs, sorted(set(w.sites))))
    return out


def shadow_jobs(parts: dict[str, str], out: str) -> dict[str, Any]:
    """Every loader, engine and mode under the device shadow, on the same 2 ranks."""
    import gnnpar
    from gnnpar.loading.typed import DistTypedNeighborLoader
    from gnnpar.storage import placement
    from gnnpar.storage.embedding import DistEmbedding, SparseAdam
    from gnnpar.storage.typed import TypedFeatureStore

    class _Unmapped(placement.PinnedRows):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("the runtime maps no pinned memory")

    res: dict[str, Any] = {}
    with DeviceShadow() as shadow:
        ctx = gnnpar.init(device=shadow.device)
        graph = gnnpar.DistGraph.load(parts["node"], ctx)
        for name, kw, store_kw in (
                ("device", {"prefetch": True}, {}),
                ("pinned", {"prefetch": False}, {"device_budget_bytes": 0}),
                ("cached", {"prefetch": True}, {"cache_bytes": 2**14})):
            store = gnnpar.DistFeatureStore(graph, ctx, **store_kw)
            res[f"node/{name}"] = _loader_reads(shadow, gnnpar.DistNeighborLoader(
                _sampler(graph, ctx), store, "train", batch_size=64, **kw))
            res[f"placement/{name}"] = store.placement
        # Pinned rows the runtime cannot map: the fallback gathers them on the host.
        mapped, placement.PinnedRows = placement.PinnedRows, _Unmapped
        try:
            store = gnnpar.DistFeatureStore(graph, ctx, device_budget_bytes=0)
        finally:
            placement.PinnedRows = mapped
        res["node/pinned-host"] = _loader_reads(shadow, gnnpar.DistNeighborLoader(
            _sampler(graph, ctx), store, "train", batch_size=64, prefetch=True))
        res["placement/pinned-host"] = store.placement
        link = gnnpar.DistGraph.load(parts["link"], ctx)
        store = gnnpar.DistFeatureStore(link, ctx, arrays={"x": link.features()})
        for name, kw in (("plain", {}), ("strict", {"strict": True})):
            res[f"link/{name}"] = _loader_reads(shadow, gnnpar.DistLinkNeighborLoader(
                _sampler(link, ctx, with_edges=True), store, "train", batch_size=64,
                prefetch=True, **kw))
        edges = gnnpar.DistGraph.load(parts["edge"], ctx)
        res["link/edge_features"] = _loader_reads(shadow, gnnpar.DistLinkNeighborLoader(
            _sampler(edges, ctx, with_edges=True),
            gnnpar.DistFeatureStore(edges, ctx, arrays={"x": edges.features()}), "train",
            batch_size=64, prefetch=True))
        kinds = gnnpar.DistGraph.load(parts["typed"], ctx)
        labels = gnnpar.DistFeatureStore(kinds, ctx, arrays={"y": kinds.part.label})
        loader = DistTypedNeighborLoader(_sampler(kinds, ctx), labels,
                                          TypedFeatureStore(kinds, ctx, cache_bytes=2**12),
                                          "train", batch_size=64, prefetch=True)
        res["typed"] = _loader_reads(shadow, loader)
        emb = DistEmbedding(kinds, ctx, 8, (1, 2))
        opt = SparseAdam([emb], lr=0.1)
        batch = next(iter(loader))
        authors = batch["author"]
        with shadow.window() as w:
            rows = emb(authors.n_id, authors.num_owned_nodes, authors.num_sampled_nodes)
            rows.square().sum().backward()
            opt.step()
        res["embedding"] = (w.num_syncs, sorted(set(w.sites)))
        # The outputs (--save-predictions, --save-embeddings) are written under it too.
        runs = {"sample": ("node", {"save_predictions": True, "save_embeddings": 0}),
                "gcn": ("node", {"name": "gcn", "cache_mb": 1}),
                "gat": ("node", {"name": "gat"}), "local_sgd": ("node", {"sync": "every:2"}),
                "link": ("link", {"task": "link", "save_embeddings": 0}),
                "typed": ("typed", {"save_predictions": True, "save_embeddings": 0}),
                "featureless": ("bare", {}),
                "full": ("node", {"mode": "full", "save_predictions": True}),
                "bns": ("node", {"mode": "full", "boundary_p": 0.5}),
                "stale": ("node", {"mode": "full", "stale": True}),
                "grid": ("node", {"mode": "full", "grid": "2,1,1", "name": "gcn"})}
        for name, (graph_name, settings) in runs.items():
            res[f"train/{name}"] = _train(shadow, ctx, parts[graph_name], f"{out}/{name}",
                                          settings)
    gnnpar.shutdown()
    return res


@pytest.fixture(scope="module")
def shadowed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from dataclasses import replace

    root = tmp_path_factory.mktemp("shadow")
    node = sbm(num_nodes=1500, avg_degree=8, num_classes=4, feat_dim=8, seed=0)
    link = sbm(num_nodes=1200, avg_degree=8, feat_dim=8, seed=0, task="link")
    rng = np.random.default_rng(0)
    graphs = {"node": node, "link": link, "bare": replace(node, x=None),
              "edge": replace(link, edge_attr=rng.standard_normal(
                  (link.num_edges, 3)).astype(np.float32)),
              "typed": typed(num_papers=800, num_authors=400, num_venues=24)}
    for name, ds in graphs.items():
        partition_graph(ds, root / name, PartitionConfig(num_parts=2),
                        **({"task": "link"} if name in ("link", "edge") else {}))
    parts = {name: str(root / name) for name in graphs}
    return run_multiproc(shadow_jobs, 2, parts, str(root / "runs"), timeout=900)[0]


def _worst(reads: list[tuple[int, Any]]) -> int:
    assert reads, "no steady batch was measured"
    return max(n for n, _ in reads)


def test_node_batches_within_budget_in_every_placement(shadowed: dict[str, Any]) -> None:
    from gnnpar.loading.node import HOST_SYNCS

    assert HOST_SYNCS == 5
    for name in ("device", "pinned", "cached"):
        assert _worst(shadowed[f"node/{name}"]) <= HOST_SYNCS, shadowed[f"node/{name}"]
    assert shadowed["placement/pinned"] == "pinned"
    assert shadowed["placement/device"] == "device"


def test_the_pinned_host_fallback_reads_each_index_list(shadowed: dict[str, Any]) -> None:
    """The fallback reads the indices of every read of owned rows on the host: the served
    rows, each hop's own rows and the seeds' labels, 5 more than the other placements."""
    from gnnpar.loading.node import HOST_SYNCS, host_syncs

    assert shadowed["placement/pinned-host"] == "pinned-host"
    budget = host_syncs(2, "pinned-host")
    assert budget == HOST_SYNCS + 5 == 10
    assert _worst(shadowed["node/pinned-host"]) <= budget, shadowed["node/pinned-host"]


def test_link_batches_within_budget(shadowed: dict[str, Any]) -> None:
    from gnnpar.loading.link import host_syncs

    assert _worst(shadowed["link/plain"]) <= host_syncs(2) == 7, shadowed["link/plain"]
    assert _worst(shadowed["link/strict"]) <= host_syncs(2, 3) == 10, shadowed["link/strict"]
    assert _worst(shadowed["link/edge_features"]) <= 7, shadowed["link/edge_features"]


def test_typed_batches_and_embeddings_within_budget(shadowed: dict[str, Any]) -> None:
    from gnnpar.loading.typed import HOST_SYNCS as TYPED
    from gnnpar.storage.embedding import HOST_SYNCS as EMBEDDING

    # Two featured types (paper, author: typed()'s), one gather: a node batch's budget.
    assert _worst(shadowed["typed"]) <= TYPED == 5, shadowed["typed"]
    assert shadowed["embedding"][0] <= EMBEDDING == 4, shadowed["embedding"]


@pytest.mark.parametrize("name, batch", [
    ("sample", 5), ("gcn", 5), ("gat", 5), ("local_sgd", 5), ("link", 7),
    ("typed", 5 + 4), ("featureless", 4 + 4)])
def test_training_steps_read_nothing_beyond_their_batch(shadowed: dict[str, Any], name: str,
                                                        batch: int) -> None:
    """A steady step (its batch, forward, backward, optimiser) reads only what its batch
    does: the loader's budget (typed and featureless: plus the embedding's 4)."""
    from gnnpar.train.trainer import STEP_HOST_SYNCS

    run = shadowed[f"train/{name}"]
    assert run["steps"], run
    assert max(n for _, _, n, _ in run["steps"]) <= batch + STEP_HOST_SYNCS, run["steps"]
    assert run["threads"] == [True]


@pytest.mark.parametrize("name", ["full", "bns", "stale", "grid"])
def test_full_graph_epochs_within_budget(shadowed: dict[str, Any], name: str) -> None:
    from gnnpar.train.fullgraph import EPOCH_HOST_SYNCS

    run = shadowed[f"train/{name}"]
    assert len(run["epochs"]) == 2 and max(run["epochs"]) <= EPOCH_HOST_SYNCS == 2, run
    assert run["threads"] == [True]


def test_outputs_are_written_under_the_shadow(shadowed: dict[str, Any]) -> None:
    """--save-predictions / --save-embeddings of every kind of run, device-correct."""
    assert shadowed["train/sample"]["outputs"] == ["embeddings", "logits", "pred"]
    assert shadowed["train/full"]["outputs"] == ["logits", "pred"]
    assert shadowed["train/link"]["outputs"] == ["embeddings"]
    assert shadowed["train/typed"]["outputs"] == ["embeddings", "logits", "pred"]
    assert shadowed["train/gcn"]["outputs"] == []
