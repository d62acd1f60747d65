"""Shared pytest configuration: skip hardware-marked tests where the hardware is absent.

The hot path runs its torch kernels in the suite (``GNNPAR_KERNELS=torch``, inherited by
every spawned rank): the compiled CPU kernels (:mod:`gnnpar.jit`: the sampler's, the
fused ReLU and dropout) cost each process about a second of CPU to load, and their output
equals the torch kernels' exactly (``tests/sampling/test_sampling_kernels.py``,
``tests/nn/test_elementwise.py``); the tests that run them say so
(``GNNPAR_KERNELS=compiled``).

Torch computes with one intra-op thread here, as every spawned rank does
(:func:`gnnpar.testing.run_multiproc`): the references this process computes are many
small operations, and on a shared 2-core machine OpenMP's threads wait for each other at
every one of them — measured on ``test_models.py``'s 2,000 sampled GCN layers, 39 s with
2 threads against 2.4 s with 1.  ``OMP_NUM_THREADS=1`` (unless set) carries that to the
one-process commands the tests start; ``--nproc`` runs set each rank's threads
themselves.
"""

from __future__ import annotations

import os

import pytest
import torch

from gnnpar.jit import AVAILABLE, compiled_kernels

os.environ.setdefault("GNNPAR_KERNELS", "torch")
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

pytest_plugins = ["tests.helpers.typed_runs"]
"""Fixtures shared by test folders: the typed runs of ``tests/loading`` and ``tests/train``."""

HEAVY = (
    "tests/reliability/test_hang_bound.py", "tests/reliability/test_launch.py",
    "tests/reliability/test_startup.py", "tests/train/test_modes.py",
    "tests/train/test_precision.py", "tests/train/test_link.py", "tests/train/test_plan.py",
    "tests/train/test_gcn_norm.py", "tests/train/test_local_sgd.py",
    "tests/train/test_accuracy.py", "tests/train/test_failures.py",
    "tests/train/test_examples.py", "tests/train/test_example_ogbn.py",
    "tests/loading/test_dist_loader.py", "tests/test_memory.py",
    "tests/test_caller_group.py", "tests/nn/test_dist_conv.py",
    "tests/loading/test_typed_runtime.py", "tests/loading/test_link_loader.py",
    "tests/parallel/test_parallel_multirank.py", "tests/test_gpu_check.py",
    "tests/train/test_typed_training.py", "tests/train/test_comm_bytes.py",
)
"""The long multi-process runs: marked ``heavy``, left out of the README's test command
(``-m "not slow and not heavy"``, a few minutes) and run by CI right after it
(``.ci/run``: ``-m "heavy and not slow"``)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the :data:`HEAVY` modules; skip ``gpu`` / ``multigpu(n)`` tests without GPUs."""
    root = config.rootpath
    for item in items:
        if str(item.path.relative_to(root)) in HEAVY:
            item.add_marker(pytest.mark.heavy)
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if "gpu" in item.keywords and n_gpu < 1:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))
        marker = item.get_closest_marker("multigpu")
        if marker is not None and n_gpu < int(marker.args[0] if marker.args else 2):
            item.add_marker(pytest.mark.skip(reason="needs several CUDA devices"))


@pytest.fixture(params=["compiled", "torch"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a CPU test with the compiled kernels (:mod:`gnnpar.jit`), then the torch ones."""
    if request.param == "compiled" and not AVAILABLE:
        pytest.skip("numba not installed")
    monkeypatch.setenv("GNNPAR_KERNELS", str(request.param))
    assert compiled_kernels(torch.device("cpu")) == (request.param == "compiled")
    return str(request.param)
