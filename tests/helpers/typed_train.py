"""Rank functions of the typed training tests (module-level, so spawned processes import them)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gnnpar.testing.typed_reference import TYPED
from tests.helpers.workers import Stop, _params, configure, small_config


def _state(trainer: Any) -> dict[str, np.ndarray]:
    emb = trainer.engine.embedding
    return {**_params(trainer), "embedding": emb.weight.numpy().copy(),
            "embedding_ids": emb.orig_ids.numpy().copy()}


def _stop_at(epoch: int, step: int) -> Any:
    """A step hook that interrupts the run after ``(epoch, step)`` (after its checkpoint)."""
    def hook(e: int, s: int, batch: Any) -> None:
        if (e, s) == (epoch, step):
            raise Stop(f"stopped at epoch {e}, step {s}")
    return hook


def train_typed(part_dir: str, out: str) -> dict[str, Any]:
    """Train to the end; the summary, final parameters and this rank's embedding rows."""
    from gnnpar.distributed import init
    from gnnpar.train.trainer import Trainer

    ctx = init()
    trainer = Trainer(small_config(out, **TYPED), part_dir, ctx)
    return {"summary": trainer.fit(), "state": _state(trainer), "rank": ctx.rank}


def resume_typed(part_dir: str, out: str) -> dict[str, Any]:
    """An uninterrupted short run and one stopped mid-epoch then resumed."""
    from gnnpar.distributed import init
    from gnnpar.train.trainer import Trainer

    ctx = init()
    cfg = small_config(f"{out}/full", **{**TYPED, "epochs": 2, "checkpoint_steps": 2})
    full = Trainer(cfg, part_dir, ctx)
    full.fit()
    res: dict[str, Any] = {"full": _state(full), "steps": full.engine.steps_per_epoch}
    run_cfg = configure(cfg, out=f"{out}/stopped")
    try:
        Trainer(run_cfg, part_dir, ctx).fit(_stop_at(1, 2))
    except Stop:
        pass
    resumed = Trainer(configure(run_cfg, resume=True), part_dir, ctx)
    resumed.fit()
    res["resumed"] = _state(resumed)
    return res


def train_featureless(part_dir: str, out: str) -> dict[str, Any]:
    """A graph without features: every node learns its input row (full-neighbour eval)."""
    from gnnpar.distributed import init
    from gnnpar.train.trainer import Trainer

    ctx = init()
    cfg = small_config(out, **{**TYPED, "epochs": 10, "eval": "full"})
    trainer = Trainer(cfg, part_dir, ctx)
    return {"summary": trainer.fit(), "rank": ctx.rank,
            "rows": trainer.engine.embedding.weight.shape[0]}


def jobs(todo: dict[str, tuple[str, tuple[Any, ...]]]) -> dict[str, Any]:
    """Run several rank functions one after another on the same ranks (starting ranks
    costs most): this module's and ``typed_workers.sample_and_embed``.

    Each calls ``init()``, which joins the process group once.
    """
    from tests.helpers.typed_workers import sample_and_embed

    funcs = {"sample_and_embed": sample_and_embed, "train_typed": train_typed,
             "resume_typed": resume_typed, "train_featureless": train_featureless}
    return {name: funcs[fn](*args) for name, (fn, args) in todo.items()}
