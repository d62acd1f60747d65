"""``gnnpar.init`` inside a process group the caller made, with one backend only.

A user who already runs ``torch.distributed`` (an NCCL-only group on GPUs) calls
``gnnpar.init()`` after ``init_process_group``: gnnpar must describe that group, not make
another, and send nothing but tensors on the group's device.  Here the caller's group is
gloo restricted to the CPU (``"cpu:gloo"``, no CUDA backend behind it, as NCCL has no CPU
one).  Both training modes and the feature-parallel layer run in it; every collective
they issue is recorded (:class:`gnnpar.testing.OpRecorder`) with its tensors' devices and
thread.  On a GPU the same worker runs in ``test_gpu.py`` against an NCCL-only group.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from gnnpar.datasets.synthetic import sbm
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc


def caller_group_worker(part_dir: str, out: str, backend: str) -> dict[str, Any]:
    """Train both modes and run the feature-parallel layer in a caller-made group."""
    import torch
    import torch.distributed as dist

    import gnnpar
    from gnnpar.nn import FeatureParallelLinear, shard_columns
    from gnnpar.testing import OpRecorder
    from gnnpar.train.cli import parse

    dist.init_process_group(backend)  # the caller's group, from the torchrun environment
    ctx = gnnpar.init()
    res: dict[str, Any] = {"backend": ctx.backend, "device": str(ctx.device),
                           "same_group": ctx.group is None and dist.get_world_size() == 2}
    main = threading.get_ident()
    collectives: list[tuple[str, list[str], bool]] = []
    for mode, flags in (("sample", ["--epochs", "3", "--fanouts", "5,5", "--batch-size", "64"]),
                        ("full", ["--epochs", "30"])):
        cfg = parse([part_dir, "--mode", mode, "--lr", "0.02", "--hidden", "16",
                     "--no-progress", "--out", f"{out}/{mode}-{ctx.rank}", *flags,
                     "--device", ctx.device.type])
        with OpRecorder() as rec:
            summary = gnnpar.Trainer(cfg, part_dir, ctx).fit()
        res[f"{mode}_acc"] = summary["test_acc"]
        collectives += [(n, sorted(d), t == main) for n, d, t in rec.collectives]
    graph = gnnpar.DistGraph.load(part_dir, ctx)
    lin = FeatureParallelLinear(graph.meta.feat_dim, 8, ctx).to(ctx.device)
    x = graph.features().to(ctx.device, torch.float32)
    ids = torch.arange(ctx.rank, graph.meta.num_nodes, 7, device=ctx.device)
    with OpRecorder() as rec:
        lin(shard_columns(ctx, x), ids).sum().backward()
    collectives += [(n, sorted(d), t == main) for n, d, t in rec.collectives]
    res["collectives"] = collectives
    dist.barrier()
    dist.destroy_process_group()
    return res


@pytest.fixture(scope="module")
def part_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("caller")
    partition_graph(sbm(num_nodes=1500, avg_degree=8, num_classes=4, feat_dim=16, seed=2,
                        homophily=0.8), 2, root / "p")
    return str(root / "p")


def test_init_describes_a_cpu_only_gloo_group(part_dir: str, tmp_path: Path) -> None:
    ranks = run_multiproc(caller_group_worker, 2, part_dir, str(tmp_path), "cpu:gloo")
    for r in ranks:
        assert r["backend"] == "cpu:gloo" and r["device"] == "cpu" and r["same_group"]
        assert r["sample_acc"] > 0.5 and r["full_acc"] > 0.5
        names = {n for n, _, _ in r["collectives"]}
        assert {"alltoall_base_", "allreduce_"} <= names, names
        for name, devices, same_thread in r["collectives"]:
            assert devices == ["cpu"], (name, devices)
            assert same_thread, name
