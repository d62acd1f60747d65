"""What the command lines show: gnnpar's log lines on stderr, as plain messages."""

from __future__ import annotations

import logging
import sys


def log_to_stderr(level: int = logging.INFO) -> None:
    """Show the ``gnnpar`` loggers' records of ``level`` and above on stderr (once)."""
    logger = logging.getLogger("gnnpar")
    if not any(getattr(h, "_gnnpar", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._gnnpar = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(level)
