"""The hot path's budget: host synchronisations and collectives per batch, one thread.

One loader batch and one training step on 2 gloo ranks run under
:class:`gnnpar.testing.OpRecorder`, which counts on the CPU what would make a CUDA host
wait for the device (value reads, data-dependent output sizes, device-to-host copies) and
records every collective with its tensors' devices and its thread.  Budgets:

* per hop: reading the gathered request counts and reading the hop's sizes (2), and
  per batch one more, the feature exchange's counts: ``2 * hops + 1``;
* collectives per batch: 3 per hop (counts, requests, padded replies) — hop 0 only the
  count all-gather when every rank trains on its own seeds — and 3 for the features
  (counts, ids, rows);
* the training step (forward, backward with DDP's all-reduce): no host sync (Adam's step
  counters are host tensors unless ``capturable``, so its ``step`` is left out);
* every collective's tensors on ``ctx.device``, every collective issued by the thread
  that runs the step (NCCL's rule: one thread per device), prefetching included.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gnnpar.datasets.synthetic import sbm
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc

FANOUTS = [10, 5]


def sync_worker(part_dir: str) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    import gnnpar
    from gnnpar.testing import OpRecorder
    from gnnpar.train.config import ModelConfig
    from gnnpar.train.models import SampledGNN, build_model, forward_batch

    ctx = gnnpar.init()
    graph = gnnpar.DistGraph.load(part_dir, ctx)
    features = gnnpar.DistFeatureStore(graph, ctx)
    loader = gnnpar.DistNeighborLoader(graph, features, FANOUTS, "train", batch_size=64,
                                       prefetch=True)
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden=16, layers=2), graph.meta.feat_dim,
                        graph.meta.num_classes)
    ddp = DistributedDataParallel(SampledGNN(model))
    opt = torch.optim.Adam(model.parameters())
    batches = iter(loader)

    def step(batch: Any) -> None:
        loss = F.cross_entropy(forward_batch(ddp, batch), batch.y[: batch.batch_size],
                               reduction="sum")
        opt.zero_grad()
        (loss * ctx.world_size / batch.global_batch_size).backward()

    for _ in range(2):  # warm-up: DDP settles its buckets in its second step
        step(next(batches))
        opt.step()
    with OpRecorder() as load, _cuda_syncs(ctx.device) as cuda_syncs:
        batch = next(batches)  # finishes the prefetched batch, starts the next one
    with OpRecorder() as train:
        step(batch)
    opt.step()  # Adam reads its step counters, host tensors unless capturable
    return {"load_syncs": dict(load.syncs), "train_syncs": dict(train.syncs),
            "load_collectives": [(n, sorted(d), t == threading.get_ident())
                                 for n, d, t in load.collectives],
            "train_collectives": [(n, sorted(d), t == threading.get_ident())
                                  for n, d, t in train.collectives],
            "device": str(ctx.device), "hops": len(FANOUTS), "cuda_syncs": len(cuda_syncs),
            "foreign_seeds": loader.seed_gids.numel() - loader.num_own_seeds}


@contextlib.contextmanager
def _cuda_syncs(device: Any) -> Iterator[list[str]]:
    """The synchronising CUDA calls made inside, as CUDA itself reports them (GPU only)."""
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


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    root = tmp_path_factory.mktemp("sync")
    partition_graph(sbm(num_nodes=2000, avg_degree=8, num_classes=4, feat_dim=8, seed=0), 2,
                    root / "p")
    return run_multiproc(sync_worker, 2, str(Path(root / "p")))


def test_host_syncs_per_batch_within_budget(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        assert sum(r["load_syncs"].values()) <= 2 * r["hops"] + 1, r["load_syncs"]
        assert r["train_syncs"] == {}, r["train_syncs"]


def test_collectives_per_batch(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        names = [n for n, _, _ in r["load_collectives"]]
        # Per hop counts, requests, replies (hop 0 only the counts when no rank took
        # another's seeds); features: counts, ids, rows.
        hop0 = 3 if any(q["foreign_seeds"] for q in ranks) else 1
        assert len(names) == hop0 + 3 + 3, names
        assert [n for n, _, _ in r["train_collectives"]] == ["allreduce_"], r


def test_collectives_on_the_device_from_one_thread(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        for name, devices, same_thread in r["load_collectives"] + r["train_collectives"]:
            assert devices == [r["device"]], (name, devices)
            assert same_thread, name
