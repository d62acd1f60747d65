"""The JSON record of a training run: arguments, per-epoch metrics, timing, bytes moved.

Every example and trainer writes one record per run so that runs can be compared and
plotted without parsing logs::

    {
      "format": "gnnpar-run", "format_version": 1,
      "args": {...},                       the run's arguments
      "env": {"world_size": 2, "torch": "2.13.0", ...},
      "epochs": [{"epoch": 0, "train_acc": ..., "epoch_time_s": ...,
                  "comm": {"halo": {"bytes_sent": ...}, ...}}, ...],
      "summary": {...}                     final figures (best accuracy, totals)
    }

Only rank 0 writes (metrics are all-reduced before they are recorded), and every write
replaces the file atomically, so the record is readable while the run goes on and
complete after a crash up to the last finished epoch.
"""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.io import read_json, write_json

FORMAT = "gnnpar-run"
FORMAT_VERSION = 1


@dataclass
class RunRecord:
    """A run's arguments and metrics, written as JSON by rank 0.

    Attributes:
        args: The run's arguments (JSON-able values).
        env: Where it ran: world size, backend, versions, host.
        epochs: One dict of metrics per finished epoch.
        summary: Final figures.
    """

    args: dict[str, Any]
    env: dict[str, Any] = field(default_factory=dict)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def start(cls, args: dict[str, Any], ctx: DistContext) -> RunRecord:
        """A new record of a run with ``args`` on the ranks of ``ctx``."""
        env = {
            "world_size": ctx.world_size,
            "backend": ctx.backend,
            "device": str(ctx.device),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "host": socket.gethostname(),
            "torch_threads": torch.get_num_threads(),
        }
        return cls(args={k: _jsonable(v) for k, v in args.items()}, env=env)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunRecord:
        """Read a record written by :meth:`write` (to continue it after a resume)."""
        doc = read_json(path, ConfigError)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ConfigError(f"not a {FORMAT} record.", path=path, field="format",
                              fix="pass a run record written by gnnpar, or a new path.")
        return cls(args=doc.get("args", {}), env=doc.get("env", {}),
                   epochs=list(doc.get("epochs", [])), summary=doc.get("summary", {}))

    def add_epoch(self, epoch: int, **metrics: Any) -> dict[str, Any]:
        """Append (or, after a resume, replace) the metrics of ``epoch``."""
        self.epochs = [e for e in self.epochs if e.get("epoch", -1) < epoch]
        entry = {"epoch": epoch, **{k: _jsonable(v) for k, v in metrics.items()}}
        self.epochs.append(entry)
        return entry

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "args": self.args,
                "env": self.env, "epochs": self.epochs, "summary": self.summary}

    def write(self, path: str | os.PathLike[str], ctx: DistContext) -> None:
        """Write the record atomically; a no-op on every rank but 0."""
        if not ctx.is_main:
            return
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        write_json(tmp, self.to_dict())
        os.replace(tmp, out)


def _jsonable(value: Any) -> Any:
    """Plain JSON value of ``value`` (paths and other objects as strings)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)
