"""Memory sizes: what an input implies, checked before allocation; what this process holds.

A node id of 10^12 in an edge list, a class label of 10^9 or ``--hidden 10000000`` each
imply arrays far larger than any machine; allocated as they are, they end in the
allocator's ``can't allocate 64000000064 bytes`` or numpy's ``Unable to allocate 931 GiB``
after work has started.  :func:`check_fits` compares what the integer implies with this
machine's physical memory before anything is allocated, and names the field and the file.
:func:`rss_bytes` and :func:`peak_rss_bytes` measure this process (the run record's peak
memory).
"""

from __future__ import annotations

import os
import resource

from gnnpar.errors import ConfigError, GnnparError

NODE_BYTES = 64
"""Bytes of per-node arrays that a graph costs at the least (the partitioner's id arrays,
docs/memory.md): what a node count is checked at."""
PARAMETER_BYTES = 16
"""Bytes per model parameter in training: fp32 weight, gradient and Adam's two moments."""


def physical_memory() -> int:
    """This machine's physical memory in bytes."""
    return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))


def format_bytes(n: float) -> str:
    """``n`` bytes as ``"931.3 GB"`` (powers of 1000)."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    raise AssertionError("unreachable")


def check_fits(count: int, bytes_each: int, *, what: str, field: str, fix: str,
               path: str | os.PathLike[str] | None = None,
               error: type[GnnparError] = ConfigError) -> None:
    """Raise ``error`` when ``count`` items of ``bytes_each`` bytes exceed physical memory.

    Args:
        count: The integer from the input (nodes, classes, parameters, ...).
        bytes_each: Bytes each of them costs at the least.
        what: What ``count`` counts and where it comes from, e.g. ``"1,000,000,000,001
            nodes (the largest node id + 1)"``.
        field: The field or flag named in the error.
        fix: What to do about it.
        path: The file it came from, if any.
        error: The exception type.
    """
    need, have = int(count) * int(bytes_each), physical_memory()
    if need > have:
        raise error(f"{what} need {format_bytes(need)} ({bytes_each} bytes each) before "
                    f"anything else, more than this machine's {format_bytes(have)} of "
                    "memory.", path=path, field=field, fix=fix)


def rss_bytes() -> int:
    """Resident memory of this process now (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux ``VmHWM``, else ``ru_maxrss``).

    ``VmHWM`` is the peak of this process image alone: ``ru_maxrss`` of a spawned worker
    starts at the resident set its parent had when it forked (Linux keeps the larger
    across ``exec``), so a worker of a large parent would report the parent's size.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
