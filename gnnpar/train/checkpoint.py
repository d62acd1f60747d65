"""Checkpoints of a model, its optimizer and the loop's state: JSON and raw tensor bytes.

A checkpoint is a directory of two files, written by rank 0::

    CKPT/
      state.json     the structure: optimizer hyper-parameters, parameter names, the
                     caller's ``extra`` state, the index of every tensor (dtype, shape,
                     byte range) and the SHA-256 of tensors.bin; digested itself
      tensors.bin    every tensor's bytes, one after the other

Nothing is unpickled on load — not a tensor, not a Python object, not an index (the
format of ``torch.distributed.checkpoint`` keeps its index as a pickle, which a shared
or downloaded checkpoint could turn into code) — and every byte is checked: a damaged
``state.json`` or ``tensors.bin`` is refused, naming the file, before any parameter
changes.  Tensors are gathered whole (``StateDictOptions(full_state_dict=True)``), so
models whose state dicts hold DTensors are saved as full tensors and sharded again on
load, for any layout.  The optimizer state uses parameter names
(``torch.distributed.checkpoint.state_dict``), so a checkpoint outlives a change of the
parameter order.

Saving is atomic: rank 0 writes a sibling temporary directory and renames it over
``CKPT`` (:func:`~gnnpar.artifacts.directory.replace_directory`); an interrupted save
leaves the previous checkpoint intact, and
:func:`~gnnpar.artifacts.directory.recover_directory` puts it back where a crash fell
between the two renames.  Every rank reads the checkpoint on load (the run
directory is shared, as for the run record).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

from gnnpar.artifacts.checks import check_finite
from gnnpar.artifacts.directory import recover_directory, replace_directory
from gnnpar.artifacts.files import storage_error, write_digested_json
from gnnpar.artifacts.kinds import CHECKPOINT_STATE, STATE_FILE, TENSORS_FILE
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError

_TENSOR = "__tensor__"
_ALIGN = 64
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool)}
"""The tensor dtypes a checkpoint stores, by the name ``state.json`` records."""
_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def _split(obj: Any, key: str, tensors: dict[str, Tensor]) -> Any:
    """JSON skeleton of ``obj``; tensors move to ``tensors`` under their path."""
    if isinstance(obj, Tensor):
        tensors[key] = obj.detach()
        return {_TENSOR: key}
    if isinstance(obj, dict):
        return {str(k): _split(v, f"{key}/{k}", tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_split(v, f"{key}/{i}", tensors) for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise ConfigError(f"{key} holds a {type(obj).__name__}, which a checkpoint cannot store.",
                      field=key, fix="keep checkpoint state to tensors, numbers, strings, "
                      "lists and dicts.")


def _join(skeleton: Any, tensors: dict[str, Tensor]) -> Any:
    """Inverse of :func:`_split`."""
    if isinstance(skeleton, dict):
        if set(skeleton) == {_TENSOR}:
            return tensors[skeleton[_TENSOR]]
        return {k: _join(v, tensors) for k, v in skeleton.items()}
    if isinstance(skeleton, list):
        return [_join(v, tensors) for v in skeleton]
    return skeleton


def _barrier(ctx: DistContext) -> None:
    if ctx.world_size > 1:
        dist.barrier(group=ctx.group)


def _write_tensors(path: Path, tensors: dict[str, Tensor]) -> tuple[dict[str, Any], str]:
    """Write the tensors' bytes to ``path``; their index and the file's SHA-256."""
    index: dict[str, Any] = {}
    h = hashlib.sha256()
    offset = 0
    with open(path, "wb") as f:
        for key, t in tensors.items():
            name = str(t.dtype).removeprefix("torch.")
            if name not in DTYPES:
                raise ConfigError(f"{key} is a {t.dtype} tensor, which a checkpoint cannot "
                                  "store.", field=key, fix=f"use one of {', '.join(DTYPES)}.")
            data = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            pad = -offset % _ALIGN
            f.write(b"\0" * pad)
            h.update(b"\0" * pad)
            offset += pad
            f.write(data)
            h.update(data)
            index[key] = {"dtype": name, "shape": list(t.shape), "offset": offset,
                          "nbytes": len(data)}
            offset += len(data)
        f.flush()
        os.fsync(f.fileno())
    return index, h.hexdigest()


@contextmanager
def _gathering() -> Iterator[None]:
    """Hold back DTensor's advice to flatten the mesh, while a checkpoint is gathered.

    A grid layer's weight is sharded on two mesh axes; gathering it whole, once per save
    or load, is not a hot path, and the advice would be logged for every tensor.
    """
    logger = logging.getLogger("torch.distributed.tensor._redistribute")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def save_checkpoint(path: str | os.PathLike[str], ctx: DistContext, model: nn.Module,
                    optimizer: torch.optim.Optimizer | None = None,
                    extra: dict[str, Any] | None = None) -> None:
    """Save ``model``, ``optimizer`` and ``extra`` to ``path`` (collective, atomic).

    Args:
        path: Checkpoint directory; replaced when it exists.
        ctx: Distributed context; every rank calls this.
        model: The model (replicated, or sharded with DTensor: gathered whole).
        optimizer: Its optimizer, if any.
        extra: Loop state (epoch, metrics, ...): JSON-able values and tensors; rank 0's
            is saved.
    """
    out = Path(path)
    with _gathering():
        if optimizer is None:
            state: dict[str, Any] = {"model": get_model_state_dict(model, options=_FULL)}
        else:
            model_sd, optim_sd = get_state_dict(model, optimizer, options=_FULL)
            state = {"model": model_sd, "optim": optim_sd}
    if ctx.is_main:
        state["extra"] = extra or {}
        tensors: dict[str, Tensor] = {}
        skeleton = _split(state, "state", tensors)
        tmp = out.parent / f".{out.name}.tmp"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            index, digest = _write_tensors(tmp / TENSORS_FILE, tensors)
            write_digested_json(tmp / STATE_FILE, atomic=False, doc={
                "format": CHECKPOINT_STATE.format, "format_version": CHECKPOINT_STATE.version,
                "world_size": ctx.world_size, "state": skeleton, "tensors": index,
                "sha256": {TENSORS_FILE: digest}})
            replace_directory(tmp, out)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            needed = sum(t.numel() * t.element_size() for t in tensors.values()) + \
                len(json.dumps(skeleton)) + (1 << 16)
            raise storage_error(exc, out.parent, needed, "the checkpoint") from None
    _barrier(ctx)


def has_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a checkpoint (its ``state.json``)."""
    return (Path(path) / STATE_FILE).is_file()


_FIX = ("use an undamaged copy of the run directory, or start the run anew "
        "(gnnpar-train --overwrite).")


def _read_doc(ckpt: Path) -> dict[str, Any]:
    """``state.json``, checked: present, this format, undamaged, well-formed."""
    recover_directory(ckpt)
    if not has_checkpoint(ckpt):
        raise ConfigError("no checkpoint here (state.json is missing).", path=ckpt,
                          fix="pass the run directory of a run that saved a checkpoint, or "
                          "start without --resume.")
    path = ckpt / STATE_FILE
    doc = CHECKPOINT_STATE.read(path, ConfigError, _FIX)
    if not isinstance(doc.get("state"), dict) or not isinstance(doc.get("world_size"), int) \
            or not isinstance(doc.get("tensors"), dict):
        raise ConfigError("state.json lacks the state, tensors or world_size field.",
                          path=path, field="state",
                          fix=_FIX)
    return doc


def checkpoint_digest(path: str | os.PathLike[str]) -> str:
    """The identity of a checkpoint, which predictions and exports bind to.

    Its ``state.json``'s digest: it covers the SHA-256 of the tensors too.

    Raises:
        ConfigError: No checkpoint at ``path``, or a damaged one.
    """
    return str(_read_doc(Path(path))["digest"])


def read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON part of a checkpoint, without reading any tensor (no process group needed).

    Returns:
        ``{"world_size": int, "extra": ...}``: the saving run's world size and its
        ``extra`` state, tensors left as ``{"__tensor__": key}`` placeholders.

    Raises:
        ConfigError: No checkpoint at ``path``, one of another format, or a damaged one.
    """
    doc = _read_doc(Path(path))
    return {"world_size": doc["world_size"], "extra": doc["state"].get("extra", {})}


def _read_tensors(ckpt: Path, doc: dict[str, Any]) -> dict[str, Tensor]:
    """Every tensor of ``tensors.bin``, checked: its SHA-256, the index, finite values.

    Resume, export and predict all read the weights through here.
    """
    path = ckpt / TENSORS_FILE
    if not path.is_file():
        raise ConfigError("the tensor file is missing.", path=path,
                          fix=_FIX)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    sums = doc.get("sha256")
    if not isinstance(sums, dict) or h.hexdigest() != sums.get(TENSORS_FILE):
        raise ConfigError("the tensor file is damaged (its SHA-256 differs from state.json's).",
                          path=path, field="sha256", fix=_FIX)
    data = np.fromfile(path, dtype=np.uint8)
    out: dict[str, Tensor] = {}
    for key, m in doc["tensors"].items():
        ok = (isinstance(m, dict) and m.get("dtype") in DTYPES
              and isinstance(m.get("shape"), list)
              and all(isinstance(d, int) and d >= 0 for d in m["shape"])
              and isinstance(m.get("offset"), int) and isinstance(m.get("nbytes"), int)
              and 0 <= m["offset"] <= m["offset"] + m["nbytes"] <= data.size)
        dtype = DTYPES.get(m.get("dtype", "")) if isinstance(m, dict) else None
        if ok and dtype is not None:
            ok = m["nbytes"] == int(np.prod(m["shape"], dtype=np.int64)) * \
                torch.empty((), dtype=dtype).element_size()
        if not ok or dtype is None:
            raise ConfigError(f"tensor {key!r} has a bad index entry {m!r}.",
                              path=ckpt / STATE_FILE, field="tensors",
                              fix=_FIX)
        raw = torch.from_numpy(data[m["offset"]:m["offset"] + m["nbytes"]].copy())
        out[key] = raw.view(dtype).reshape(m["shape"])
    check_finite(out, path, ConfigError, "training would spread it to every weight: "
                 "use an earlier, undamaged copy of the run, or start anew (--overwrite).")
    return out


def load_checkpoint(path: str | os.PathLike[str], ctx: DistContext, model: nn.Module,
                    optimizer: torch.optim.Optimizer | None = None) -> dict[str, Any]:
    """Restore ``model`` (and ``optimizer``) from ``path`` in place (collective).

    Args:
        path: Directory written by :func:`save_checkpoint`.
        ctx: Distributed context; every rank calls this.
        model: A model of the same architecture as the saved one (any sharding).
        optimizer: An optimizer of the same kind over ``model``'s parameters.

    Returns:
        The ``extra`` state given to :func:`save_checkpoint`.

    Raises:
        ConfigError: No checkpoint, a damaged one, or one that does not fit the model.
    """
    ckpt = Path(path)
    doc = _read_doc(ckpt)
    skeleton = doc["state"]
    if optimizer is not None and "optim" not in skeleton:
        raise ConfigError("the checkpoint holds no optimizer state.", path=ckpt,
                          field="optim", fix="load it without an optimizer.")
    tensors = _read_tensors(ckpt, doc)
    try:
        state = _join(skeleton, tensors)
    except KeyError as exc:
        raise ConfigError(f"state.json names tensor {exc} that the index lacks.",
                          path=ckpt / STATE_FILE, field="tensors",
                          fix=_FIX) from exc
    options = StateDictOptions(full_state_dict=True)
    try:
        with _gathering():
            if optimizer is None:
                set_model_state_dict(model, state["model"], options=options)
            else:
                set_state_dict(model, optimizer, model_state_dict=state["model"],
                               optim_state_dict=state["optim"], options=options)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise ConfigError(f"the checkpoint does not fit this model/optimizer ({exc}).",
                          path=ckpt, field="model",
                          fix="resume with the same model arguments as the saved run.") from exc
    extra: dict[str, Any] = state["extra"]
    return extra


def read_model_state(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """The model's whole state dict from a checkpoint, on the CPU (no process group).

    Args:
        path: Directory written by :func:`save_checkpoint` (``OUT/checkpoint``).

    Raises:
        ConfigError: No checkpoint at ``path``, or a damaged one.
    """
    ckpt = Path(path)
    doc = _read_doc(ckpt)
    try:
        state: dict[str, Tensor] = _join(doc["state"]["model"], _read_tensors(ckpt, doc))
    except KeyError as exc:
        raise ConfigError(f"state.json names tensor {exc} that the index lacks.",
                          path=ckpt / STATE_FILE, field="tensors",
                          fix="export a checkpoint written by gnnpar-train.") from exc
    return state
