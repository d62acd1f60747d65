"""What a run leaves to use: per-node predictions and embeddings, one shard per rank.

``gnnpar-train --save-predictions [--save-embeddings [LAYER]]`` and ``gnnpar-predict``
write, after the exact full-neighbour inference, each rank's owned rows -- never the
whole table -- as ``.npy`` shards, then an index (DGL's distributed examples write an
embedding table the same way)::

    OUT/predictions/
      index.json          format, task, node_type, num_nodes, arrays (dtype, width,
                          layer), shards (rank, rows, dir, and each file's size and
                          SHA-256), source (the command, run, checkpoint and partition
                          that produced them), accuracy from these logits; its own digest
      rank-R/node_ids.npy int64 [n_R]     dataset id of each row (within node_type)
      rank-R/logits.npy   float32 [n_R, C]
      rank-R/pred.npy     int64 [n_R]     the class: argmax of the logits
      rank-R/embeddings.npy float32 [n_R, H]  (--save-embeddings)

Every rank streams its rows into a staging directory beside the output in chunks (no
second copy on the host), hashing them on the way; rank 0 then writes the index and
renames the whole directory into place (:mod:`gnnpar.artifacts.directory`), so the
previous predictions stay whole until the new ones are complete, and a failed or killed
write leaves them (or nothing), never a mixture.  Outputs that are not finite (a model
that diverged) are refused before anything is replaced.

:func:`load_predictions` reads the shards back in dataset order, after checking every
size before it allocates, every file's size and digest against the index, dtypes and
shapes, node ids (each node exactly once), finite values, that ``pred`` is the argmax of
``logits``, and -- for a run's own predictions -- that they come from the run's current
checkpoint (a resumed run that did not write them again leaves them stale).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.artifacts.arrays import NpyWriter, load_npy
from gnnpar.artifacts.checks import check_finite, check_listed_file, count_field
from gnnpar.artifacts.directory import commit_staging, open_staging, staging_dir
from gnnpar.artifacts.files import storage_error, write_digested_json
from gnnpar.artifacts.kinds import (
    CHECKPOINT_DIR,
    INDEX_FILE,
    PREDICTIONS,
    PREDICTIONS_DIR,
    PREDICTIONS_INDEX,
    PREVIOUS_RUN,
    RECORD_FILE,
)
from gnnpar.errors import ConfigError
from gnnpar.sizes import check_fits

ARRAYS = ("logits", "pred", "embeddings")
DTYPES: dict[str, np.dtype[Any]] = {
    "node_ids": np.dtype(np.int64), "logits": np.dtype(np.float32),
    "pred": np.dtype(np.int64), "embeddings": np.dtype(np.float32)}
"""The dtype of every array a predictions directory holds."""
CHUNK_ROWS = 1 << 16
"""Rows copied to the host (and written) at a time."""
_WORDS = 8
"""A SHA-256 travels between ranks as 8 integers of 32 bits."""
_FIX = "write them again: gnnpar-predict RUN_DIR DATASET --out DIR (or train with " \
       "--save-predictions)."


def _shard(rank: int) -> str:
    return f"rank-{rank}"


class PredictionWriter:
    """One rank's shard of a predictions directory (construction and :meth:`close` collective).

    Call it with the output's lock held (the run directory's, or ``gnnpar-predict``'s).

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
        from gnnpar.faults import agreed

        self.out, self.ctx = Path(out), ctx
        self.rows = int(len(node_ids))
        self.arrays: dict[str, dict[str, Any]] = {}
        self.files: dict[str, tuple[str, int, int]] = {}  # name -> sha256, bytes, not finite
        self.head = {"format": PREDICTIONS_INDEX.format,
                     "format_version": PREDICTIONS_INDEX.version, "task": task,
                     "node_type": node_type, "num_nodes": int(num_nodes)}
        agreed(ctx, lambda: open_staging(self.out) if ctx.is_main else None)
        self.all_rows = all_gather_ints(ctx, [self.rows])[:, 0].tolist()
        self.shard = staging_dir(self.out) / _shard(ctx.rank)
        with self._storage(0):
            self.shard.mkdir()
        self._put("node_ids", (self.rows,), node_ids)

    @contextlib.contextmanager
    def _storage(self, needed: int) -> Iterator[None]:
        """Turn a write the file system refuses into a StorageError naming the output."""
        try:
            yield
        except OSError as exc:
            raise storage_error(exc, self.out.parent, needed, "the predictions") from None

    def write(self, name: str, rows: Any, **info: Any) -> None:
        """Write array ``name`` (:data:`ARRAYS`): ``rows`` ``[n, ...]``, a tensor anywhere.

        Args:
            name: ``logits``, ``pred`` or ``embeddings``.
            rows: One row per node of this shard, in row order.
            info: Recorded with the array in the index (e.g. ``layer=1``).
        """
        import torch

        if rows.shape[0] != self.rows:
            raise ValueError(f"{name}: {rows.shape[0]} rows for a shard of {self.rows}")
        self._put(name, tuple(rows.shape), rows.detach() if isinstance(
            rows, torch.Tensor) else rows)
        self.arrays[name] = {"dtype": DTYPES[name].name, "width": int(rows.shape[1])
                             if rows.ndim > 1 else None, **info}

    def _put(self, name: str, shape: tuple[int, ...], rows: Any) -> None:
        """Copy ``rows`` chunk by chunk into ``rank-R/NAME.npy``, hashed and counted."""
        with self._storage(int(np.prod(shape)) * DTYPES[name].itemsize):
            self.files[name] = self._stream(name, shape, rows)

    def _stream(self, name: str, shape: tuple[int, ...], rows: Any) -> tuple[str, int, int]:
        writer = NpyWriter(self.shard / f"{name}.npy", shape, DTYPES[name])
        bad = 0
        try:
            for lo in range(0, shape[0], CHUNK_ROWS):
                chunk = rows[lo:lo + CHUNK_ROWS]
                if hasattr(chunk, "cpu"):  # a tensor (bf16 has no numpy type): as the file's
                    chunk = chunk.cpu().numpy() if not chunk.is_floating_point() else \
                        chunk.float().cpu().numpy()
                chunk = np.asarray(chunk, dtype=DTYPES[name])
                if chunk.dtype.kind == "f":
                    bad += int(chunk.size - np.isfinite(chunk).sum())
                writer.write(chunk)
        except BaseException:
            writer.abort()
            raise
        return writer.close(), writer.bytes, bad

    def close(self, **extra: Any) -> Path:
        """Write the index and rename the directory into place (collective).

        Args:
            extra: More fields of the index (``accuracy``, ``source``: rank 0's).

        Returns:
            The predictions directory.

        Raises:
            ConfigError: An output is not finite on some rank (nothing replaced), or the
                output holds files gnnpar did not write (nothing replaced).
        """
        from gnnpar.comm import all_gather_ints
        from gnnpar.faults import agreed

        names = ("node_ids", *ARRAYS)
        mine: list[int] = []
        for name in names:
            digest, size, bad = self.files.get(name, ("0" * 64, -1, 0))
            mine += [size, bad, *(int(digest[i:i + 8], 16) for i in range(0, 64, 8))]
        table = all_gather_ints(self.ctx, mine).tolist()
        stride = 2 + _WORDS
        not_finite = sum(row[j * stride + 1] for row in table for j in range(len(names)))
        if not_finite:
            if self.ctx.is_main:
                shutil.rmtree(staging_dir(self.out), ignore_errors=True)
            raise ConfigError(f"{not_finite:,} output values are NaN or infinite: the model "
                              "diverged, so no predictions were written.", path=self.out,
                              field="logits", fix="train again with a lower --lr (or from an "
                              "earlier checkpoint); the previous predictions are untouched.")
        shards = []
        for rank, row in enumerate(table):
            files = {}
            for j, name in enumerate(names):
                size = row[j * stride]
                if size >= 0:
                    words = row[j * stride + 2:(j + 1) * stride]
                    files[f"{name}.npy"] = {"sha256": "".join(f"{w:08x}" for w in words),
                                            "bytes": size}
            shards.append({"rank": rank, "rows": int(self.all_rows[rank]),
                           "dir": _shard(rank), "files": files})

        def commit() -> None:
            if self.ctx.is_main:
                with self._storage(0):
                    write_digested_json(staging_dir(self.out) / INDEX_FILE, atomic=False, doc={
                        **self.head, "arrays": self.arrays, "shards": shards, **extra})
                    commit_staging(self.out, PREDICTIONS, ConfigError)

        agreed(self.ctx, commit)
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


def _locate(path: Path) -> tuple[Path, Path | None]:
    """``(predictions directory, its run directory or None)`` of what the user passed."""
    from gnnpar.train.rundir import settle_for_reading

    for candidate in (path, path.parent):  # a run a killed --overwrite set aside: back
        if (candidate / PREVIOUS_RUN).is_dir():
            settle_for_reading(candidate)
    run = path if (path / RECORD_FILE).is_file() else (
        path.parent if path.name == PREDICTIONS_DIR and (path.parent / RECORD_FILE).is_file()
        else None)
    if run is not None:
        settle_for_reading(run)
    where = run / PREDICTIONS_DIR if run is not None else path
    if (where / INDEX_FILE).is_file():
        return where, run
    if where.is_dir() and (run is None or any(where.iterdir())):
        raise ConfigError("holds no index.json: these are not complete gnnpar predictions.",
                          path=where, field=INDEX_FILE, fix=_FIX)
    raise ConfigError("holds no predictions.", path=path, field=PREDICTIONS_DIR,
                      fix="train with --save-predictions (or --save-embeddings), or run "
                      "gnnpar-predict RUN_DIR DATASET --out DIR.")


def _check_index(index: dict[str, Any], path: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    """``(num_nodes, arrays)`` of an index, every field checked before it sizes anything."""
    if index.get("task") not in ("node", "link"):
        raise ConfigError(f"task is {index.get('task')!r}, not node or link.", path=path,
                          field="task", fix=_FIX)
    if not isinstance(index.get("node_type"), str | None):
        raise ConfigError("node_type is not a string.", path=path, field="node_type", fix=_FIX)
    n = count_field(index, "num_nodes", path, ConfigError, _FIX)
    arrays = index.get("arrays")
    if not isinstance(arrays, dict) or not set(arrays) <= set(ARRAYS):
        raise ConfigError(f"arrays must map some of {', '.join(ARRAYS)} to their dtype and "
                          "width.", path=path, field="arrays", fix=_FIX)
    for name, info in arrays.items():
        if not isinstance(info, dict) or info.get("dtype") != DTYPES[name].name:
            raise ConfigError(f"{name} must be {DTYPES[name].name}, the index says "
                              f"{info.get('dtype') if isinstance(info, dict) else info!r}.",
                              path=path, field=f"arrays.{name}.dtype", fix=_FIX)
        if name == "pred":
            if info.get("width") is not None:
                raise ConfigError("pred has one class per node (width null).", path=path,
                                  field="arrays.pred.width", fix=_FIX)
        else:
            count_field(info, "width", path, ConfigError, _FIX, low=1, high=1 << 20)
        if info.get("layer") is not None:
            count_field(info, "layer", path, ConfigError, _FIX, high=1 << 10)
    shards = index.get("shards")
    if not isinstance(shards, list) or not shards:
        raise ConfigError("shards must be a list of every rank's rows and files.", path=path,
                          field="shards", fix=_FIX)
    total = 0
    want = {"node_ids.npy", *(f"{a}.npy" for a in arrays)}
    for r, shard in enumerate(shards):
        if not isinstance(shard, dict) or shard.get("rank") != r or \
                shard.get("dir") != _shard(r) or not isinstance(shard.get("files"), dict) \
                or set(shard["files"]) != want:
            raise ConfigError(f"shards[{r}] is not rank {r}'s entry (rank, rows, dir "
                              f"{_shard(r)!r} and files {sorted(want)}).", path=path,
                              field="shards", fix=_FIX)
        total += count_field(shard, "rows", path, ConfigError, _FIX)
    if total != n:
        raise ConfigError(f"the shards hold {total:,} rows for num_nodes {n:,}.", path=path,
                          field="num_nodes", fix=_FIX)
    width = sum(DTYPES[a].itemsize * (arrays[a].get("width") or 1) for a in arrays)
    check_fits(n, width + 8, what=f"{n:,} nodes of predictions", field="num_nodes",
               fix="read the shards one at a time with numpy (np.load(mmap_mode='r')).",
               path=path)
    return n, arrays


def _check_binding(index: dict[str, Any], path: Path, run: Path) -> None:
    """Refuse a run's predictions that its current checkpoint did not write."""
    from gnnpar.train.checkpoint import checkpoint_digest, has_checkpoint

    source = index.get("source")
    made_by = source.get("checkpoint") if isinstance(source, dict) else None
    ckpt = run / CHECKPOINT_DIR
    if not has_checkpoint(ckpt) or made_by == checkpoint_digest(ckpt):
        return
    raise ConfigError("these predictions are stale: the run's checkpoint has changed since "
                      "they were written (it was resumed without --save-predictions).",
                      path=path, field="source.checkpoint",
                      fix=f"write them again: gnnpar-predict {run} DATASET --out DIR, or "
                      "resume the run with --save-predictions.")


def load_predictions(path: str | os.PathLike[str]) -> Predictions:
    """Read the predictions of a run directory (or a ``gnnpar-predict --out``) in dataset order.

    Args:
        path: A run directory trained with ``--save-predictions`` / ``--save-embeddings``,
            its ``predictions/`` folder, or a ``gnnpar-predict`` output directory.

    Returns:
        Every array as one table whose row ``i`` is dataset node ``i``.

    Raises:
        ConfigError: No (complete) predictions there, or damaged, swapped, edited or
            stale ones (see the module docstring); the message names the file and field.

    Example::

        p = gnnpar.load_predictions("runs/sbm-sample")
        p.pred[:10], p.logits.shape, p.index["accuracy"]
    """
    root, run = _locate(Path(path))
    index_file = root / INDEX_FILE
    index = PREDICTIONS_INDEX.read(index_file, ConfigError, _FIX)
    n, arrays = _check_index(index, index_file)
    if run is not None:
        _check_binding(index, index_file, run)
    tables: dict[str, np.ndarray] = {}
    for name, info in arrays.items():
        shape = (n,) if info.get("width") is None else (n, int(info["width"]))
        tables[name] = np.empty(shape, dtype=DTYPES[name])
    seen = np.zeros(n, dtype=bool)
    for shard in index["shards"]:
        where = root / shard["dir"]
        rows = int(shard["rows"])
        for file, entry in shard["files"].items():
            check_listed_file(where / file, entry, ConfigError, _FIX, f"shards.{file}")
        ids = load_npy(where / "node_ids.npy", dtype=np.int64, shape=(rows,),
                       error=ConfigError)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
            raise ConfigError(f"holds ids outside [0, {n}).", path=where / "node_ids.npy",
                              field="node_ids", fix=_FIX)
        if seen[ids].any() or len(np.unique(ids)) != len(ids):
            raise ConfigError("holds a node that another row already holds.",
                              path=where / "node_ids.npy", field="node_ids", fix=_FIX)
        seen[ids] = True
        for name, table in tables.items():
            part = load_npy(where / f"{name}.npy", dtype=DTYPES[name],
                            shape=(rows, *table.shape[1:]), error=ConfigError)
            check_finite({name: part}, where / f"{name}.npy", ConfigError, _FIX)
            table[ids] = part
    if not seen.all():
        raise ConfigError(f"{int((~seen).sum())} of {n} nodes have no row.", path=index_file,
                          field="shards", fix=_FIX)
    if "pred" in tables and "logits" in tables and n and not np.array_equal(
            tables["pred"], tables["logits"].argmax(-1)):
        raise ConfigError("pred is not the argmax of logits for every node.",
                          path=index_file, field="pred", fix=_FIX)
    emb = arrays.get("embeddings", {})
    return Predictions(task=str(index["task"]), node_type=index.get("node_type"), num_nodes=n,
                       logits=tables.get("logits"), pred=tables.get("pred"),
                       embeddings=tables.get("embeddings"), layer=emb.get("layer"),
                       index=index)


def describe(index: dict[str, Any]) -> str:
    """One line naming what a predictions directory holds (for the CLI summaries)."""
    arrays = ", ".join(f"{k} [{index['num_nodes']:,}" + (f" x {v['width']}]" if v.get("width")
                                                         else "]")
                       for k, v in index["arrays"].items())
    return f"{arrays} in {len(index['shards'])} shards" + (
        f"; accuracy {json.dumps(index['accuracy'])}" if index.get("accuracy") else "")
