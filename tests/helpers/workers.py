"""Rank functions of the trainer tests (module-level, so spawned processes can import them)."""

from __future__ import annotations

import os
import zlib
from dataclasses import replace
from typing import Any

import numpy as np
from torch_geometric.data import Data

from gnnpar.errors import GnnparError
from gnnpar.train.config import Config, ModelConfig

ACCURACY = {"epochs": 5, "batch_size": 128, "fanouts": (10, 5), "lr": 0.01}
"""Hyper-parameters of the accuracy comparison (hidden size: ``small_config``'s)."""


class Stop(Exception):
    """Raised by a step hook to interrupt a run, as a crash or Ctrl-C would."""


def configure(cfg: Config, **settings: Any) -> Config:
    """``cfg`` with each ``field=value`` set in the section that has the field."""
    sections = {f: name for name in ("data", "partition", "model", "train", "sample", "full",
                                     "link", "run") for f in vars(getattr(cfg, name))}
    by_section: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        by_section.setdefault(sections[key], {})[key] = value
    return replace(cfg, **{name: replace(getattr(cfg, name), **values)
                           for name, values in by_section.items()})


def small_config(out: str, **settings: Any) -> Config:
    """A configuration small enough for a test graph of a few thousand nodes."""
    base = {"fanouts": (10, 5), "batch_size": 64, "epochs": 2, "lr": 0.01,
            "eval_batch_size": 512, "progress": False, "out": out}
    return configure(Config(model=ModelConfig(hidden=32)), **{**base, **settings})


def _params(trainer: Any) -> dict[str, np.ndarray]:
    # numpy, not tensors: torch would share tensors through file descriptors that close
    # when the rank's process exits.
    return {k: v.detach().cpu().numpy().copy() for k, v in trainer.trained.state_dict().items()}


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
    from gnnpar.train.trainer import Trainer

    ctx = init()
    trainer = Trainer(cfg, part_dir, ctx)
    summary = trainer.fit()
    return {"summary": summary, "params": _params(trainer), "rank": ctx.rank}


def _tracer(trace: list[tuple[int, int, int]], stop_at: tuple[int, int] | None = None) -> Any:
    """A step hook that records ``(epoch, step, crc of the batch's n_id)`` and may stop."""
    def hook(epoch: int, step: int, batch: Data | None) -> None:
        assert batch is not None
        trace.append((epoch, step, zlib.crc32(batch.n_id.numpy().tobytes())))
        if (epoch, step) == stop_at:
            raise Stop(f"stopped at epoch {epoch}, step {step}")
    return hook


def resume(part_dir: str, out: str) -> dict[str, Any]:
    """An uninterrupted run, and runs stopped mid-epoch / after an epoch, then resumed."""
    from gnnpar.distributed import init
    from gnnpar.train.trainer import Trainer

    ctx = init()
    res: dict[str, Any] = {}
    cfg = small_config(f"{out}/full", checkpoint_steps=2, epochs=2)
    trace: list[tuple[int, int, int]] = []
    full = Trainer(cfg, part_dir, ctx)
    full.fit(_tracer(trace))
    res["full"] = {"trace": trace, "params": _params(full), "steps": full.engine.steps_per_epoch,
                   "record": full.record.to_dict()}
    # Stop after the un-checkpointed step 4 of epoch 1 (last checkpoint: after step 3),
    # and after step 0 of epoch 1 (last checkpoint: the end of epoch 0).
    for name, stop in (("mid_epoch", (1, 4)), ("epoch_boundary", (1, 0))):
        run_cfg = configure(cfg, out=f"{out}/{name}")
        before: list[tuple[int, int, int]] = []
        try:
            Trainer(run_cfg, part_dir, ctx).fit(_tracer(before, stop))
        except Stop:
            pass
        after: list[tuple[int, int, int]] = []
        resumed = Trainer(configure(run_cfg, resume=True), part_dir, ctx)
        resumed.fit(_tracer(after))
        res[name] = {"before": before, "after": after, "params": _params(resumed),
                     "record": resumed.record.to_dict()}
    return res


EVAL_RUNS = {"full": {}, "full_chunked": {"eval_budget_mb": 2**-10},
             "sampled": {"eval": "sampled"}, "none": {"eval": "none"}}
"""One short run per ``--eval`` setting; ``full_chunked``: inference in 1 KiB chunks."""


def eval_runs(part_dir: str, out: str) -> dict[str, Any]:
    """Train each of :data:`EVAL_RUNS`; their run records."""
    from gnnpar.distributed import init
    from gnnpar.train.trainer import Trainer

    ctx = init()
    records = {}
    for name, settings in EVAL_RUNS.items():
        trainer = Trainer(small_config(f"{out}/{name}", epochs=1, **settings), part_dir, ctx)
        trainer.fit()
        records[name] = trainer.record.to_dict()
    return records


def failing(part_dir: str, out: str, mode: str, bad_rank: int, at_step: int,
            timeout_s: float = 20.0) -> str:
    """Train; rank ``bad_rank`` raises (``mode="raise"``) or dies (``"exit"``) mid-epoch.

    Returns:
        What this rank's run ended with (the failing rank raises or dies instead).
    """
    from datetime import timedelta

    from gnnpar.distributed import init
    from gnnpar.testing import scaled
    from gnnpar.train.trainer import Trainer

    timeout_s = scaled(timeout_s)  # a loaded machine: later, not failed
    ctx = init(timeout=timedelta(seconds=timeout_s))

    def hook(epoch: int, step: int, batch: Data) -> None:
        if ctx.rank == bad_rank and step == at_step:
            if mode == "exit":
                os._exit(3)
            raise ValueError(f"injected failure on rank {ctx.rank}")

    try:
        Trainer(small_config(out, timeout_s=timeout_s), part_dir, ctx).fit(hook)
    except GnnparError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "finished without error"


def bad_inputs(cases: dict[str, tuple[str, Config]]) -> dict[str, str]:
    """Construct and fit a trainer for each case; return the error each one raised."""
    from gnnpar.distributed import init
    from gnnpar.train.trainer import Trainer

    ctx = init()
    out = {}
    for name, (part_dir, cfg) in cases.items():
        try:
            Trainer(cfg, part_dir, ctx).fit()
            out[name] = "no error"
        except GnnparError as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    return out



def _remote_counts(batch: Data, first: int, last: int, fanouts: tuple[int, ...]
                   ) -> dict[str, int]:
    """What gathering and sampling ``batch`` must have sent to and received from other ranks.

    Counted from the batch and this rank's id range ``[first, last)`` alone: the remote
    nodes (feature rows), and per hop the remote frontier nodes (one request id each, and
    one reply row of ``fanout`` neighbour ids back).
    """
    n_id = batch.n_id
    remote = ((n_id < first) | (n_id >= last)).numpy()
    out = {"feature_rows": int(np.unique(n_id.numpy()[remote]).size), "sample_bytes": 0}
    bounds = np.cumsum([0, *batch.num_sampled_nodes])
    for hop, k in enumerate(fanouts):
        out["sample_bytes"] += 8 * (1 + k) * int(remote[bounds[hop]:bounds[hop + 1]].sum())
    return out


def _counter(counts: dict[int, dict[str, int]], first: int, last: int,
             fanouts: tuple[int, ...]) -> Any:
    """A step hook adding each batch's :func:`_remote_counts` to ``counts[epoch]``."""
    def hook(epoch: int, step: int, batch: Data | None) -> None:
        if batch is None:
            return
        acc = counts.setdefault(epoch, {"feature_rows": 0, "sample_bytes": 0, "steps": 0})
        acc["steps"] += 1
        for k, v in _remote_counts(batch.cpu(), first, last, fanouts).items():
            acc[k] += v
    return hook


def byte_runs(part_dir: str, out: str) -> dict[str, Any]:
    """Both modes with a step hook that counts, from the batches, what had to travel; the
    sampled mode again reading the other rank's part in place (``peer_reads``)."""
    from gnnpar.distributed import init
    from gnnpar.train.trainer import Trainer

    ctx = init()
    res: dict[str, Any] = {}
    for mode, model in (("sample", "sage"), ("full", "gcn"), ("sample-peers", "sage")):
        if mode.startswith("sample"):  # sample: everything exchanged, as across machines
            cfg = small_config(f"{out}/{mode}", epochs=3, eval_every=2,
                               peer_reads=mode == "sample-peers")
        else:
            cfg = configure(Config(model=ModelConfig(hidden=32)), mode="full", name=model,
                            epochs=3, eval_every=2, lr=0.01, progress=False,
                            out=f"{out}/{mode}")
        trainer = Trainer(cfg, part_dir, ctx)
        counts: dict[int, dict[str, int]] = {}
        trainer.fit(_counter(counts, trainer.graph.first_gid,
                             trainer.graph.first_gid + trainer.graph.num_owned,
                             cfg.sample.fanouts))
        res[mode] = {"counts": counts, "record": trainer.record.to_dict(),
                     "params": _params(trainer)}
    return res


def _crc(trainer: Any) -> int:
    """CRC of the trained model's parameters (equal on two ranks: the same model)."""
    return zlib.crc32(b"".join(v.detach().cpu().numpy().tobytes()
                               for v in trainer.trained.state_dict().values()))


def local_sgd_runs(part_dir: str, out: str) -> dict[str, Any]:
    """Synchronous training and local SGD (``--sync every:H``), a parameter CRC per step."""
    from gnnpar.distributed import init
    from gnnpar.train.trainer import Trainer

    ctx = init()
    res: dict[str, Any] = {}
    for name, settings in (("default", {}), ("every1", {"sync": "every:1"}),
                           ("every4", {"sync": "every:4"}),
                           ("warm", {"sync": "every:4", "sync_warmup": 3})):
        cfg = small_config(f"{out}/{name}", epochs=2, batch_size=32, **settings)
        trainer = Trainer(cfg, part_dir, ctx)
        crcs: list[tuple[int, int, int]] = []
        trainer.fit(lambda e, s, b, t=trainer, c=crcs: c.append((e, s, _crc(t))))
        res[name] = {"params": _params(trainer), "crcs": crcs,
                     "record": trainer.record.to_dict(),
                     "num_params": sum(p.numel() for p in trainer.trained.parameters()),
                     "steps": trainer.engine.steps_per_epoch}
    return res


def local_sgd_resume(part_dir: str, out: str) -> dict[str, Any]:
    """Local SGD (every:3, optimiser averaged) uninterrupted, and stopped then resumed."""
    from gnnpar.distributed import init
    from gnnpar.train.trainer import Trainer

    ctx = init()
    cfg = small_config(f"{out}/full", epochs=2, batch_size=32, sync="every:3",
                       sync_optimizer=True, checkpoint_steps=2)
    full = Trainer(cfg, part_dir, ctx)
    full.fit()
    stopped = configure(cfg, out=f"{out}/stopped")
    try:
        Trainer(stopped, part_dir, ctx).fit(_tracer([], (1, 4)))
    except Stop:
        pass
    again = Trainer(configure(stopped, resume=True), part_dir, ctx)
    again.fit()
    return {"full": _params(full), "resumed": _params(again)}
