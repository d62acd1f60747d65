"""``gnnpar.init`` inside a process group the caller made, with one backend only.

A user who already runs ``torch.distributed`` (an NCCL-only group on GPUs) calls
``gnnpar.init()`` after ``init_process_group``: gnnpar must describe that group, not make
another, and send nothing but tensors on the group's device.  Here the caller's group is
gloo restricted to the CPU (``"cpu:gloo"``, no CUDA backend behind it, as NCCL has no CPU
one).  Both training modes run in it under the device shadow
(:class:`gnnpar.testing.DeviceShadow`), which fails on a collective carrying a host tensor
and records every collective with the thread that issued it.  On a GPU the same
worker runs in ``test_gpu.py`` against an NCCL-only group.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from gnnpar.datasets.synthetic import sbm
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc


def caller_group_worker(part_dir: str, out: str, backend: str) -> dict[str, Any]:
    """Train both modes in a caller-made group.

    On the CPU under the device shadow (a host tensor in a collective fails the run); on
    CUDA (``backend="nccl"``) as it is, the collectives' real devices recorded.
    """
    from contextlib import nullcontext

    import torch.distributed as dist

    import gnnpar
    from gnnpar.shadow import CollectiveLog, DeviceShadow
    from gnnpar.train.cli import parse

    dist.init_process_group(backend)  # the caller's group, from the torchrun environment
    shadow = None if backend == "nccl" else DeviceShadow()
    with shadow or nullcontext():
        ctx = gnnpar.init(device=None if shadow is None else shadow.device)
        res: dict[str, Any] = {"backend": ctx.backend, "device": str(ctx.device),
                               "same_group": ctx.group is None and dist.get_world_size() == 2}
        main = threading.get_ident()
        log = CollectiveLog()
        for mode, flags in (("sample", ["--epochs", "3", "--fanouts", "5,5",
                                        "--batch-size", "64"]),
                            ("full", ["--epochs", "30"])):
            cfg = parse([part_dir, "--mode", mode, "--lr", "0.02", "--hidden", "16",
                         "--no-progress", "--out", f"{out}/{mode}-{ctx.rank}", *flags,
                         "--device", ctx.device.type])
            with log:
                summary = gnnpar.Trainer(cfg, part_dir, ctx).fit()
            res[f"{mode}_acc"] = summary["test_acc"]
    res["collectives"] = [(n, list(d), t == main) for n, d, t in log.entries]
    dist.barrier()
    dist.destroy_process_group()
    return res


@pytest.fixture(scope="module")
def part_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("caller")
    partition_graph(sbm(num_nodes=1500, avg_degree=8, num_classes=4, feat_dim=16, seed=2,
                        homophily=0.8), root / "p", PartitionConfig(num_parts=2))
    return str(root / "p")


def test_init_describes_a_cpu_only_gloo_group(part_dir: str, tmp_path: Path) -> None:
    ranks = run_multiproc(caller_group_worker, 2, part_dir, str(tmp_path), "cpu:gloo")
    for r in ranks:
        assert r["backend"] == "cpu:gloo" and r["device"] == "cpu:0" and r["same_group"]
        assert r["sample_acc"] > 0.5 and r["full_acc"] > 0.5
        names = {n for n, _, _ in r["collectives"]}
        assert {"alltoall_base_", "allreduce_"} <= names, names
        # A host tensor in any of them would have failed the run (the shadow's check);
        # tensors torch made in C++ (DDP's) are untracked and report the real CPU.
        for name, devices, same_thread in r["collectives"]:
            assert set(devices) <= {r["device"], "cpu"}, (name, devices)
            assert same_thread, name
