"""Keep freed host memory for reuse: the C allocator's settings for a training process.

Every training step allocates and frees the same large host buffers (the activations and
gradients of a sampled batch: ``[10k, 256]`` float32, 10 MB each).  glibc's ``malloc``
serves a block that large with ``mmap`` and unmaps it on ``free``, or trims the top of its
heap back to the kernel, so the next step faults the same pages in again, zero-filled by
the kernel.  On the benchmark machine a GraphSAGE step (one thread, SBM 100k, fan-outs
15,10, batch 1024) took about 7,000 minor page faults and 10 ms of kernel time out of
55 ms.  :func:`retain_freed_memory` raises both thresholds, so freed blocks stay in the
heap for the next step: no faults, 13% less time per step.  A process's peak resident
memory is what its live tensors need at their largest, as before; what it holds between
steps no longer drops below that.

PyTorch's CPU tuning guide recommends the same for its workloads (an allocator that
keeps memory: jemalloc or tcmalloc); these settings need no preloaded library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""``mallopt`` parameters (glibc's ``malloc.h``)."""

RETAIN_BYTES = 1 << 30
"""Blocks up to this size come from the heap; free space up to it stays at its top."""


@functools.cache
def retain_freed_memory() -> bool:
    """Have glibc keep freed blocks of up to :data:`RETAIN_BYTES` in the process.

    Call once per process before the training loop (``gnnpar-train``'s workers do).
    Returns whether the settings took: False where the C library is not glibc (macOS,
    musl, Windows), where they are left as they are.
    """
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # glibc caps the mmap threshold (at 32 MiB in older releases): take the largest it
    # accepts; setting it also turns off the dynamic threshold that trimming follows.
    for size in (RETAIN_BYTES, 32 << 20):
        if mallopt(M_MMAP_THRESHOLD, size) == 1:
            break
    else:
        return False
    return bool(mallopt(M_TRIM_THRESHOLD, RETAIN_BYTES) == 1)
