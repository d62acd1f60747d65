"""Exception types of gnnpar.

Every user-facing error names *where* (a file or an argument), *what* (the field) and
*how to fix it*, so that one message is enough to act on.  All derive from
:class:`GnnparError`, and each also derives from the builtin type a caller would expect
(``ValueError`` for bad data, ``RuntimeError`` for a failed run), so ``except ValueError``
keeps working.
"""

from __future__ import annotations

import os


class GnnparError(Exception):
    """Base class of all gnnpar errors.

    Args:
        message: What is wrong, with the offending values.
        path: The file or directory concerned, if any.
        field: The field, column or argument concerned, if any.
        fix: What the user should do about it.
        cause_rank: In a distributed run, the rank whose failure this error reports when
            it is another rank's (``None``: this rank's own).

    Attributes:
        reported_by_cause: Set on the copy of a live peer's error that every other rank
            raises (the peer raises and can print its own).
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike[str] | None = None,
        field: str | None = None,
        fix: str | None = None,
        cause_rank: int | None = None,
    ) -> None:
        self.message = message
        self.path = None if path is None else os.fspath(path)
        self.field = field
        self.fix = fix
        self.cause_rank = cause_rank
        self.reported_by_cause = False
        super().__init__(self._format())

    def _format(self) -> str:
        where = ": ".join(p for p in (self.path, self.field) if p)
        text = f"{where}: {self.message}" if where else self.message
        if self.fix:
            text += f" Fix: {self.fix}"
        return text

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Keeps the keyword arguments when the error crosses a process boundary.
        return (_rebuild, (type(self), self.message, self.path, self.field, self.fix,
                           self.cause_rank))


def _rebuild(
    cls: type[GnnparError], message: str, path: str | None, field: str | None, fix: str | None,
    cause_rank: int | None = None,
) -> GnnparError:
    return cls(message, path=path, field=field, fix=fix, cause_rank=cause_rank)


class DatasetError(GnnparError, ValueError):
    """A dataset, an input file or a dataset spec is malformed or missing."""


class PartitionError(GnnparError, ValueError):
    """A partition directory is missing, corrupted, or does not fit the request."""


class ConfigError(GnnparError, ValueError):
    """An argument or configuration value is out of range or inconsistent."""


class DistributedError(GnnparError, RuntimeError):
    """A distributed run failed: a peer died, timed out, or disagreed."""


class StorageError(GnnparError, OSError):
    """An output cannot be written: the disk is full, read-only, or not writable."""
