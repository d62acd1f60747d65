"""Checkpoints of a model, its optimizer and the loop's state, with torch.distributed.checkpoint.

A checkpoint is a directory::

    CKPT/
      .metadata, __0_0.distcp ...   torch.distributed.checkpoint (DCP) files: every tensor
      state.json                    the non-tensor structure (optimizer hyper-parameters,
                                    parameter names) and the caller's ``extra`` state

Tensors go through DCP (each rank writes its share; replicated tensors once), everything
else is JSON, so loading never unpickles a tensor or a Python object from the checkpoint
(DCP's own ``.metadata`` index is the one pickle DCP reads).  Saving is atomic: ranks write
into a sibling temporary directory that rank 0 renames over ``CKPT`` once every rank is
done, so an interrupted save leaves the previous checkpoint intact.

Works for replicated models (full-graph and DDP training) and for models whose state
dicts hold DTensors; the optimizer state dict uses parameter names
(``torch.distributed.checkpoint.state_dict``), so a checkpoint outlives a change of the
parameter order.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.io import read_json, replace_directory, write_json

STATE_FILE = "state.json"
FORMAT = "gnnpar-checkpoint"
FORMAT_VERSION = 1
_TENSOR = "__tensor__"


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


def save_checkpoint(path: str | os.PathLike[str], ctx: DistContext, model: nn.Module,
                    optimizer: torch.optim.Optimizer | None = None,
                    extra: dict[str, Any] | None = None) -> None:
    """Save ``model``, ``optimizer`` and ``extra`` to ``path`` (collective, atomic).

    Args:
        path: Checkpoint directory; replaced when it exists.
        ctx: Distributed context; every rank calls this.
        model: The model (replicated or sharded with DTensor).
        optimizer: Its optimizer, if any.
        extra: Loop state (epoch, metrics, ...): JSON-able values and tensors.
    """
    out = Path(path)
    tmp = out.parent / f".{out.name}.tmp"
    if ctx.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    _barrier(ctx)
    if optimizer is None:
        state: dict[str, Any] = {"model": model.state_dict()}
    else:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
    state["extra"] = extra or {}
    tensors: dict[str, Tensor] = {}
    skeleton = _split(state, "state", tensors)
    dcp_save(tensors, checkpoint_id=tmp, process_group=ctx.group)
    if ctx.is_main:
        write_json(tmp / STATE_FILE, {"format": FORMAT, "format_version": FORMAT_VERSION,
                                      "world_size": ctx.world_size, "state": skeleton})
        replace_directory(tmp, out)
    _barrier(ctx)


def has_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a complete checkpoint."""
    return (Path(path) / STATE_FILE).is_file()


def read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON part of a checkpoint, without loading any tensor (no process group needed).

    Returns:
        ``{"world_size": int, "extra": ...}``: the saving run's world size and its
        ``extra`` state, tensors left as ``{"__tensor__": key}`` placeholders.

    Raises:
        ConfigError: No checkpoint at ``path``, or one of another format.
    """
    ckpt = Path(path)
    if not has_checkpoint(ckpt):
        raise ConfigError("no checkpoint here (state.json is missing).", path=ckpt,
                          fix="pass the run directory of a run that saved a checkpoint, or "
                          "start without --resume.")
    doc = read_json(ckpt / STATE_FILE, ConfigError)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or \
            doc.get("format_version") != FORMAT_VERSION:
        raise ConfigError(f"not a {FORMAT} v{FORMAT_VERSION} checkpoint.",
                          path=ckpt / STATE_FILE, field="format",
                          fix="resume from a checkpoint written by this gnnpar version.")
    state = doc.get("state")
    if not isinstance(state, dict) or not isinstance(doc.get("world_size"), int):
        raise ConfigError("state.json lacks the state or world_size field.",
                          path=ckpt / STATE_FILE, field="state",
                          fix="resume from a checkpoint written by gnnpar, or start anew.")
    return {"world_size": doc["world_size"], "extra": state.get("extra", {})}


def load_checkpoint(path: str | os.PathLike[str], ctx: DistContext, model: nn.Module,
                    optimizer: torch.optim.Optimizer | None = None) -> dict[str, Any]:
    """Restore ``model`` (and ``optimizer``) from ``path`` in place (collective).

    Args:
        path: Directory written by :func:`save_checkpoint`.
        ctx: Distributed context; every rank calls this.
        model: A model of the same architecture as the saved one.
        optimizer: An optimizer of the same kind over ``model``'s parameters.

    Returns:
        The ``extra`` state given to :func:`save_checkpoint`.
    """
    ckpt = Path(path)
    read_state(ckpt)  # checks the format
    skeleton = read_json(ckpt / STATE_FILE, ConfigError)["state"]
    if optimizer is not None and "optim" not in skeleton:
        raise ConfigError("the checkpoint holds no optimizer state.", path=ckpt,
                          field="optim", fix="load it without an optimizer.")
    meta = FileSystemReader(ckpt).read_metadata().state_dict_metadata
    tensors = {
        key: torch.empty(m.size, dtype=m.properties.dtype)
        for key, m in meta.items() if isinstance(m, TensorStorageMetadata)
    }
    dcp_load(tensors, checkpoint_id=ckpt, process_group=ctx.group)
    state = _join(skeleton, tensors)
    try:
        if optimizer is None:
            model.load_state_dict(state["model"])
        else:
            set_state_dict(model, optimizer, model_state_dict=state["model"],
                           optim_state_dict=state["optim"])
    except (RuntimeError, KeyError, ValueError) as exc:
        raise ConfigError(f"the checkpoint does not fit this model/optimizer ({exc}).",
                          path=ckpt, field="model",
                          fix="resume with the same model arguments as the saved run.") from exc
    extra: dict[str, Any] = state["extra"]
    return extra
