"""``retain_freed_memory``: freed step-sized buffers are reused, not faulted in again.

Reference: the kernel's count of minor page faults (``getrusage``) of a fresh process
that allocates and writes three 40 MB tensors, then frees them, 20 times (a training
step's activations), with the default allocator settings and with them retained.  By
default glibc maps blocks that large (above its 32 MiB ceiling for the heap) and unmaps
them on free, so each round faults its 29,297 pages in again; retained, the heap keeps
them once it has grown (five rounds of warm-up are not counted).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_CHILD = """
import resource, sys, torch
from gnnpar.malloc import retain_freed_memory
took = retain_freed_memory() if sys.argv[1] == "retain" else False
def step():
    buffers = [torch.empty(10_000_000).fill_(1.0) for _ in range(3)]
    del buffers
for _ in range(5):  # warm-up: glibc's heap grows to the step's size
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print(took, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True,
                         text=True, check=True, timeout=300).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_retained_memory_is_reused_without_page_faults() -> None:
    took, default = _faults("default")
    pages = 20 * 3 * 9766  # 4 KiB pages written
    assert took == "False" and default > 0.9 * pages
    took, retained = _faults("retain")
    assert took == "True"
    assert retained < 0.01 * pages
