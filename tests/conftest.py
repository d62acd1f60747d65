"""Shared pytest configuration: skip hardware-marked tests where the hardware is absent.

Samplers run their torch kernels in the suite (``GNNPAR_SAMPLER=torch``, inherited by
every spawned rank): the compiled CPU kernels (:mod:`gnnpar.sampling.compiled`) cost each
process about a second of CPU to load, and their output equals the torch kernels'
exactly (``tests/runtime/test_sampling_kernels.py``); the tests that run them say so
(``GNNPAR_SAMPLER=compiled``).
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("GNNPAR_SAMPLER", "torch")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu`` / ``multigpu(n)`` tests on machines without enough CUDA devices."""
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if "gpu" in item.keywords and n_gpu < 1:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))
        marker = item.get_closest_marker("multigpu")
        if marker is not None and n_gpu < int(marker.args[0] if marker.args else 2):
            item.add_marker(pytest.mark.skip(reason="needs several CUDA devices"))
