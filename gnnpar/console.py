"""What the command lines show: gnnpar's log lines on stderr, as plain messages."""

from __future__ import annotations

import logging
import sys
from typing import TextIO


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler that writes to ``sys.stderr`` as it is when a record comes.

    A command run in-process more than once (tests, notebooks) may see ``sys.stderr``
    replaced between runs; a handler that kept the first stream would write to a closed
    one ("--- Logging error ---").
    """

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass  # always the current sys.stderr


def log_to_stderr(level: int = logging.INFO) -> None:
    """Show the ``gnnpar`` loggers' records of ``level`` and above on stderr (once)."""
    logger = logging.getLogger("gnnpar")
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level)


def format_duration(seconds: float) -> str:
    """``"45 s"``, ``"3 min 05 s"`` or ``"2 h 07 min"``: a duration as a person reads it."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def bars_off(progress: bool) -> bool | None:
    """Tqdm's ``disable`` for a bar shown when ``progress`` asks, on a terminal only.

    ``None`` lets tqdm draw only when its stream (stderr) is a terminal, so redirected
    logs (``nohup``, Slurm, CI, ``2> log``) get no bars.
    """
    return None if progress else True
