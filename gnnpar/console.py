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
