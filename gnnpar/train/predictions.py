"""What a run leaves to use: per-node predictions and embeddings, one shard per rank.

``gnnpar-train --save-predictions [--save-embeddings [LAYER]]`` and ``gnnpar-predict``
write, after the exact full-neighbour inference, each rank's owned rows -- never the
whole table -- as ``.npy`` shards, then an index (DGL's distributed examples write an
embedding table the same way)::

    OUT/predictions/
      index.json          format, task, node_type, num_nodes, arrays (dtype, width,
                          layer), shards (rank, rows), accuracy from these logits
      rank-R/node_ids.npy int64 [n_R]     dataset id of each row (within node_type)
      rank-R/logits.npy   float32 [n_R, C]
      rank-R/pred.npy     int64 [n_R]     the class: argmax of the logits
      rank-R/embeddings.npy float32 [n_R, H]  (--save-embeddings)

A rank streams its rows into memory-mapped ``.npy`` files in chunks (no second copy on
the host); ``index.json`` is written last, by rank 0, once every rank has finished, and
removed first when a directory is written again, so a directory with an index is
complete.  :func:`load_predictions` reads the shards back in dataset order.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.errors import ConfigError
from gnnpar.io import write_json
from gnnpar.train.record import read_format

FORMAT = "gnnpar-predictions"
FORMAT_VERSION = 1
INDEX_FILE = "index.json"
PREDICTIONS_DIR = "predictions"
ARRAYS = ("logits", "pred", "embeddings")
CHUNK_ROWS = 1 << 16
"""Rows copied to the host (and written) at a time."""


def _shard(out: Path, rank: int) -> Path:
    return out / f"rank-{rank}"


class PredictionWriter:
    """One rank's shard of a predictions directory (construction and :meth:`close` collective).

    Args:
        out: The predictions directory (``OUT/predictions``, or ``gnnpar-predict --out``).
        ctx: Distributed context.
        node_ids: ``[n]`` dataset ids of this rank's rows, in row order (a memory map is
            copied in chunks).
        task: ``node`` or ``link``.
        node_type: The node type of a typed graph's rows (``None``: homogeneous).
        num_nodes: Dataset ids are in ``[0, num_nodes)``.
    """

    def __init__(self, out: str | os.PathLike[str], ctx: Any, node_ids: Any, task: str,
                 node_type: str | None, num_nodes: int) -> None:
        from gnnpar.comm import all_gather_ints

        self.out, self.ctx = Path(out), ctx
        self.rows = int(len(node_ids))
        self.arrays: dict[str, dict[str, Any]] = {}
        self.head = {"format": FORMAT, "format_version": FORMAT_VERSION, "task": task,
                     "node_type": node_type, "num_nodes": int(num_nodes)}
        if ctx.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / INDEX_FILE).unlink(missing_ok=True)  # incomplete from here on
        # No rank writes into the directory while it still has an old index.
        self.all_rows = all_gather_ints(ctx, [self.rows])[:, 0].tolist()
        shard = _shard(self.out, ctx.rank)
        if shard.exists():
            shutil.rmtree(shard)
        shard.mkdir(parents=True)
        self._put("node_ids", np.dtype(np.int64), (self.rows,), node_ids)

    def write(self, name: str, rows: Any, **info: Any) -> None:
        """Write array ``name`` (:data:`ARRAYS`): ``rows`` ``[n, ...]``, a tensor anywhere.

        Args:
            name: ``logits``, ``pred`` or ``embeddings``.
            rows: One row per node of this shard, in row order.
            info: Recorded with the array in the index (e.g. ``layer=1``).
        """
        import torch

        dtype = np.dtype(np.int64 if name == "pred" else np.float32)
        if rows.shape[0] != self.rows:
            raise ValueError(f"{name}: {rows.shape[0]} rows for a shard of {self.rows}")
        self._put(name, dtype, tuple(rows.shape), rows.detach() if isinstance(
            rows, torch.Tensor) else rows)
        self.arrays[name] = {"dtype": dtype.name, "width": int(rows.shape[1])
                             if rows.ndim > 1 else None, **info}

    def _put(self, name: str, dtype: np.dtype[Any], shape: tuple[int, ...], rows: Any) -> None:
        """Copy ``rows`` chunk by chunk into ``rank-R/NAME.npy`` (written aside, renamed)."""
        shard = _shard(self.out, self.ctx.rank)
        tmp = shard / f".{name}.npy.tmp"
        mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
        for lo in range(0, shape[0], CHUNK_ROWS):
            chunk = rows[lo:lo + CHUNK_ROWS]
            if hasattr(chunk, "cpu"):  # a tensor (bf16 has no numpy type): as the file's
                chunk = chunk.cpu().numpy() if not chunk.is_floating_point() else \
                    chunk.float().cpu().numpy()
            mm[lo:lo + len(chunk)] = chunk
        mm.flush()
        del mm
        os.replace(tmp, shard / f"{name}.npy")

    def close(self, **extra: Any) -> Path:
        """Write the index once every rank has written its shard (collective).

        Args:
            extra: More fields of the index (``accuracy``, ``source``).

        Returns:
            The predictions directory.
        """
        from gnnpar.comm import all_gather_ints

        all_gather_ints(self.ctx, [len(self.arrays)])  # every shard is complete
        if self.ctx.is_main:
            write_json(self.out / INDEX_FILE, {
                **self.head, "arrays": self.arrays,
                "shards": [{"rank": r, "rows": int(n), "dir": _shard(Path(), r).name}
                           for r, n in enumerate(self.all_rows)], **extra})
        return self.out


@dataclass
class Predictions:
    """A predictions directory read back in dataset order (:func:`load_predictions`).

    Attributes:
        task: ``node`` or ``link``.
        node_type: The node type of a typed graph (its ids), else ``None``.
        num_nodes: Rows: node ``i``'s values are row ``i``.
        logits: ``[N, C]`` float32, or ``None`` (not written).
        pred: ``[N]`` int64 classes, or ``None``.
        embeddings: ``[N, H]`` float32, or ``None``.
        layer: The layer ``embeddings`` come from.
        index: The whole ``index.json`` (``accuracy``, ``source``, ...).
    """

    task: str
    node_type: str | None
    num_nodes: int
    logits: np.ndarray | None
    pred: np.ndarray | None
    embeddings: np.ndarray | None
    layer: int | None
    index: dict[str, Any]


def _index_path(path: Path) -> Path:
    for candidate in (path / PREDICTIONS_DIR / INDEX_FILE, path / INDEX_FILE):
        if candidate.is_file():
            return candidate
    if (path / PREDICTIONS_DIR).is_dir() or path.name == PREDICTIONS_DIR:
        raise ConfigError("holds no index.json: the predictions are incomplete (the run "
                          "stopped while writing them).", path=path, field=INDEX_FILE,
                          fix="write them again: gnnpar-predict RUN_DIR DATASET --out DIR.")
    raise ConfigError("holds no predictions.", path=path, field=PREDICTIONS_DIR,
                      fix="train with --save-predictions (or --save-embeddings), or run "
                      "gnnpar-predict RUN_DIR DATASET --out DIR.")


def load_predictions(path: str | os.PathLike[str]) -> Predictions:
    """Read the predictions of a run directory (or a ``gnnpar-predict --out``) in dataset order.

    Args:
        path: A run directory trained with ``--save-predictions`` / ``--save-embeddings``,
            its ``predictions/`` folder, or a ``gnnpar-predict`` output directory.

    Returns:
        Every array as one table whose row ``i`` is dataset node ``i``.

    Raises:
        ConfigError: No (complete) predictions there, or a shard that does not match
            the index (the message names the file).

    Example::

        p = gnnpar.load_predictions("runs/sbm-sample")
        p.pred[:10], p.logits.shape, p.index["accuracy"]
    """
    index_file = _index_path(Path(path))
    root = index_file.parent
    index = read_format(index_file, FORMAT, FORMAT_VERSION, "index",
                        "pass a directory written by gnnpar-train or gnnpar-predict.",
                        "read it with the gnnpar version that wrote it.")
    n = int(index["num_nodes"])
    arrays: dict[str, dict[str, Any]] = index["arrays"]
    tables: dict[str, np.ndarray] = {}
    for name, info in arrays.items():
        if name not in ARRAYS:
            continue
        shape = (n,) if info.get("width") is None else (n, int(info["width"]))
        fill = -1 if name == "pred" else np.nan
        tables[name] = np.full(shape, fill, dtype=np.dtype(info["dtype"]))
    seen = np.zeros(n, dtype=bool)
    for shard in index["shards"]:
        where = root / Path(shard["dir"]).name
        ids = _read(where / "node_ids.npy", (int(shard["rows"]),))
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
            raise ConfigError(f"holds ids outside [0, {n}).", path=where / "node_ids.npy",
                              field="node_ids", fix="write the predictions again.")
        seen[ids] = True
        for name, table in tables.items():
            table[ids] = _read(where / f"{name}.npy", (len(ids), *table.shape[1:]))
    if not seen.all():
        raise ConfigError(f"{int((~seen).sum())} of {n} nodes have no row.", path=index_file,
                          field="shards", fix="write the predictions again (every rank).")
    emb = arrays.get("embeddings", {})
    return Predictions(task=str(index["task"]), node_type=index.get("node_type"), num_nodes=n,
                       logits=tables.get("logits"), pred=tables.get("pred"),
                       embeddings=tables.get("embeddings"), layer=emb.get("layer"),
                       index=index)


def _read(path: Path, shape: tuple[int, ...]) -> np.ndarray:
    """A shard's array, memory-mapped, checked against the index's shape."""
    try:
        a: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot be read ({exc}).", path=path, field=path.stem,
                          fix="write the predictions again.") from None
    if a.shape != shape:
        raise ConfigError(f"has shape {list(a.shape)}, the index says {list(shape)}.",
                          path=path, field=path.stem, fix="write the predictions again.")
    return a


def describe(index: dict[str, Any]) -> str:
    """One line naming what a predictions directory holds (for the CLI summaries)."""
    arrays = ", ".join(f"{k} [{index['num_nodes']:,}" + (f" x {v['width']}]" if v.get("width")
                                                         else "]")
                       for k, v in index["arrays"].items())
    return f"{arrays} in {len(index['shards'])} shards" + (
        f"; accuracy {json.dumps(index['accuracy'])}" if index.get("accuracy") else "")
