"""Time and peak memory of each stage of ``gnnpar-partition``.

:class:`StageMeter` times each stage and reads its peak resident set (RSS): on Linux the
process's high-water mark (``VmHWM``) is reset at the start of a stage (``5`` written to
``/proc/self/clear_refs``) and read at its end; the largest peak of the stage's child
processes (parallel part writers, ``--workers``) is kept beside it. Elsewhere only times
are kept. The figures
vary from run to run, so they are printed and returned, never written into
``meta.json``, whose bytes depend only on the inputs. The reset also resets what
``getrusage`` reports as the process's peak: the run's peak is :meth:`StageMeter.peak`.
"""

from __future__ import annotations

import contextlib
import resource
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _reset_peak() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def peak_rss() -> int | None:
    """This process's peak RSS in bytes since the last reset (``None`` off Linux)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@dataclass
class Stage:
    """One stage: its name, wall seconds, peak RSS here and of its largest child process.

    Bytes; ``None`` when unknown, or (children) when the stage started none.
    """

    name: str
    seconds: float
    peak_rss: int | None
    worker_peak_rss: int | None = None


@dataclass
class StageMeter:
    """The stages of one run, in order."""

    stages: list[Stage] = field(default_factory=list)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Measure the ``with`` block as stage ``name``."""
        measured = _reset_peak()
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        start = time.perf_counter()
        try:
            yield
        finally:
            peak = peak_rss() if measured else None
            child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
            self.stages.append(Stage(name, time.perf_counter() - start, peak,
                                     child if child > children else None))

    def peak(self) -> int | None:
        """The largest stage peak (bytes)."""
        peaks = [s.peak_rss for s in self.stages if s.peak_rss is not None]
        return max(peaks) if peaks else None

    def to_dict(self, num_edges: int) -> list[dict[str, object]]:
        """The stages as JSON-ready rows, with bytes per stored edge."""
        return [{"stage": s.name, "seconds": round(s.seconds, 3), "peak_rss": s.peak_rss,
                 "worker_peak_rss": s.worker_peak_rss,
                 "bytes_per_edge": (round(s.peak_rss / num_edges, 1)
                                    if s.peak_rss is not None and num_edges else None)}
                for s in self.stages]

    def format(self, num_edges: int) -> str:
        """A text table: stage, seconds, peak RSS, bytes per stored edge."""
        lines = [f"{'stage':>10}{'seconds':>10}{'peak RSS':>12}{'B/edge':>9}"]
        for row in self.to_dict(num_edges):
            rss = row["peak_rss"]
            shown = f"{rss / 2**20:,.0f} MiB" if isinstance(rss, int) else "n/a"
            per = row["bytes_per_edge"]
            worker = row["worker_peak_rss"]
            lines.append(f"{row['stage']:>10}{row['seconds']:>10.2f}{shown:>12}"
                         f"{per if per is not None else 'n/a':>9}"
                         + (f"  (each writer up to {worker / 2**20:,.0f} MiB)"
                            if isinstance(worker, int) else ""))
        return "\n".join(lines)
