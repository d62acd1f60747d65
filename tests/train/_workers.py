"""Rank functions of the trainer tests (module-level, so spawned processes can import them)."""

from __future__ import annotations

import os
import zlib
from dataclasses import replace
from typing import Any

import numpy as np
from torch_geometric.data import Data

from gnnpar.config import Config, DataConfig, ModelConfig, TrainConfig
from gnnpar.errors import GnnparError

ACCURACY = {"epochs": 5, "batch_size": 128, "fanouts": (10, 5), "lr": 0.01}
"""Hyper-parameters of the accuracy comparison (hidden size: ``small_config``'s)."""


class Stop(Exception):
    """Raised by a step hook to interrupt a run, as a crash or Ctrl-C would."""


def small_config(out: str, **train: Any) -> Config:
    """A configuration small enough for a test graph of a few thousand nodes."""
    t = {"fanouts": (10, 5), "batch_size": 64, "epochs": 2, "lr": 0.01, "eval_batch_size": 512,
         "progress": False, "out": out, **train}
    return Config(data=DataConfig(), model=ModelConfig(hidden=32), train=TrainConfig(**t))


def _params(trainer: Any) -> dict[str, np.ndarray]:
    # numpy, not tensors: torch would share tensors through file descriptors that close
    # when the rank's process exits.
    return {k: v.detach().cpu().numpy().copy() for k, v in trainer.model.state_dict().items()}


def jobs(todo: dict[str, tuple[str, tuple[Any, ...]]]) -> dict[str, Any]:
    """Run several of this module's rank functions one after another on the same ranks.

    Args:
        todo: ``{name: (function name, arguments)}``; each function calls ``init()``,
            which joins the process group once and then returns the same context.

    Returns:
        ``{name: result}``.
    """
    return {name: globals()[fn](*args) for name, (fn, args) in todo.items()}


def train(part_dir: str, cfg: Config) -> dict[str, Any]:
    """Train to the end; return the summary and the final parameters."""
    from gnnpar.distributed import init
    from gnnpar.trainer import Trainer

    ctx = init()
    trainer = Trainer(cfg, part_dir, ctx)
    summary = trainer.fit()
    return {"summary": summary, "params": _params(trainer), "rank": ctx.rank}


def _tracer(trace: list[tuple[int, int, int]], stop_at: tuple[int, int] | None = None) -> Any:
    """A step hook that records ``(epoch, step, crc of the batch's n_id)`` and may stop."""
    def hook(epoch: int, step: int, batch: Data) -> None:
        trace.append((epoch, step, zlib.crc32(batch.n_id.numpy().tobytes())))
        if (epoch, step) == stop_at:
            raise Stop(f"stopped at epoch {epoch}, step {step}")
    return hook


def resume(part_dir: str, out: str) -> dict[str, Any]:
    """An uninterrupted run, and runs stopped mid-epoch / after an epoch, then resumed."""
    from gnnpar.distributed import init
    from gnnpar.trainer import Trainer

    ctx = init()
    res: dict[str, Any] = {}
    cfg = small_config(f"{out}/full", checkpoint_steps=2, epochs=2)
    trace: list[tuple[int, int, int]] = []
    full = Trainer(cfg, part_dir, ctx)
    full.fit(_tracer(trace))
    res["full"] = {"trace": trace, "params": _params(full), "steps": len(full.loader),
                   "record": full.record.to_dict()}
    # Stop after the un-checkpointed step 4 of epoch 1 (last checkpoint: after step 3),
    # and after step 0 of epoch 1 (last checkpoint: the end of epoch 0).
    for name, stop in (("mid_epoch", (1, 4)), ("epoch_boundary", (1, 0))):
        run_cfg = replace(cfg, train=replace(cfg.train, out=f"{out}/{name}"))
        before: list[tuple[int, int, int]] = []
        try:
            Trainer(run_cfg, part_dir, ctx).fit(_tracer(before, stop))
        except Stop:
            pass
        after: list[tuple[int, int, int]] = []
        resumed = Trainer(replace(run_cfg, train=replace(run_cfg.train, resume=True)),
                          part_dir, ctx)
        resumed.fit(_tracer(after))
        res[name] = {"before": before, "after": after, "params": _params(resumed),
                     "record": resumed.record.to_dict()}
    return res


def failing(part_dir: str, out: str, mode: str, bad_rank: int, at_step: int) -> str:
    """Train; rank ``bad_rank`` raises (``mode="raise"``) or dies (``"exit"``) mid-epoch.

    Returns:
        What this rank's run ended with (the failing rank raises or dies instead).
    """
    from gnnpar.distributed import init
    from gnnpar.trainer import Trainer

    ctx = init()

    def hook(epoch: int, step: int, batch: Data) -> None:
        if ctx.rank == bad_rank and step == at_step:
            if mode == "exit":
                os._exit(3)
            raise ValueError(f"injected failure on rank {ctx.rank}")

    try:
        Trainer(small_config(out), part_dir, ctx).fit(hook)
    except GnnparError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "finished without error"


def bad_inputs(cases: dict[str, tuple[str, Config]]) -> dict[str, str]:
    """Construct and fit a trainer for each case; return the error each one raised."""
    from gnnpar.distributed import init
    from gnnpar.trainer import Trainer

    ctx = init()
    out = {}
    for name, (part_dir, cfg) in cases.items():
        try:
            Trainer(cfg, part_dir, ctx).fit()
            out[name] = "no error"
        except GnnparError as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    return out

