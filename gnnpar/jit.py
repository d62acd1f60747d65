"""Compiled CPU kernels: numba, when installed, and when they serve a device.

The hot path's kernels are whole-tensor torch operations, so they run unchanged on a GPU.
On a CPU some of them cost many passes over their data where a compiled loop makes one:
the sampler's (:mod:`gnnpar.sampling.compiled`) and the fused ReLU and dropout
(:mod:`gnnpar.nn.dropout`).  Each such kernel computes the same values as its torch
counterpart (the tests compare them) and runs only where :func:`compiled_kernels` says.

numba is optional (``pip install gnnpar[fast]``): :data:`AVAILABLE` says whether it
imports.  ``GNNPAR_KERNELS=torch`` keeps the torch kernels on a CPU too (what the
benchmarks set to measure them, and the test suite to spare each rank the compiled
kernels' loading, about a second of CPU).  Compiled code is cached beside its module
(``__pycache__``), so only the first process compiles (a few seconds).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from gnnpar.device import accelerated

try:
    import numba
    AVAILABLE = True
except ImportError:  # pragma: no cover - numba is an optional extra
    AVAILABLE = False
# AVAILABLE: whether the compiled kernels can be used (numba imports).


def njit(fn: Any) -> Any:
    """``fn`` compiled (cached, without the GIL or bounds checks), or as it is without numba."""
    return numba.njit(cache=True, nogil=True, boundscheck=False)(fn) if AVAILABLE else fn


def compiled_kernels(device: torch.device) -> bool:
    """Whether the compiled kernels serve ``device``.

    On a CPU that is not an accelerator's stand-in, when numba imports and the
    environment variable ``GNNPAR_KERNELS`` is not ``torch``.
    """
    return (AVAILABLE and not accelerated(device)
            and os.environ.get("GNNPAR_KERNELS", "") != "torch")
