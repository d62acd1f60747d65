"""What only the benchmarks measure: activations that autograd holds for backward, sync
budgets, and the records of ``gnnpar-train`` runs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from gnnpar.parallel.measure import is_parameter, tensor_bytes


class _Held:
    """A saved activation; gives its bytes back to the meter when autograd frees it."""

    def __init__(self, meter: SavedActivationMeter, t: torch.Tensor) -> None:
        self.meter, self.tensor = meter, t
        local = t.to_local() if isinstance(t, DTensor) else t
        try:
            self.key = local.untyped_storage().data_ptr() if local.numel() else id(local)
        except RuntimeError:  # a wrapper subclass (an async collective's result): no storage
            self.key = id(local)
        self.nbytes = tensor_bytes(t)
        meter._acquire(self.key, self.nbytes)

    def __del__(self) -> None:
        self.meter._release(self.key)


class SavedActivationMeter(torch.autograd.graph.saved_tensors_hooks):
    """Peak bytes of activations that autograd holds for backward, inside ``with``.

    Parameters (and views of them) are not counted; a storage saved by several
    operations counts once.

    Attributes:
        live: Bytes held now.
        peak: Most bytes held at once since entering.
    """

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0
        self._refs: dict[int, list[int]] = {}
        super().__init__(self._pack, self._unpack)

    def __enter__(self) -> SavedActivationMeter:  # type: ignore[override]  # noqa: D105
        super().__enter__()
        return self

    def _pack(self, t: torch.Tensor) -> object:
        return t if is_parameter(t) else _Held(self, t)

    @staticmethod
    def _unpack(obj: object) -> torch.Tensor:
        return obj.tensor if isinstance(obj, _Held) else obj  # type: ignore[return-value]

    def _acquire(self, key: int, nbytes: int) -> None:
        ref = self._refs.setdefault(key, [0, nbytes])
        if ref[0] == 0:
            self.live += nbytes
            self.peak = max(self.peak, self.live)
        ref[0] += 1

    def _release(self, key: int) -> None:
        ref = self._refs[key]
        ref[0] -= 1
        if ref[0] == 0:
            self.live -= ref[1]
            del self._refs[key]


def budget_worker(part_dir: str, fanouts: list[int], batch_size: int,
                  batches: int) -> dict[str, float]:
    """Host synchronisations and collectives per loader batch and per training step.

    A rank of :func:`gnnpar.testing.run_multiproc` under :class:`gnnpar.shadow.DeviceShadow`
    (what would make a CUDA host wait; collectives): a prefetching loader as the trainer
    builds it, and a GraphSAGE step (forward, backward with DDP) per batch, each counted
    in its own window.
    """
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    import gnnpar
    from gnnpar.models.node import SampledGNN, build_model, forward_batch
    from gnnpar.sampling.fanouts import Fanouts
    from gnnpar.sampling.neighbor import DistNeighborSampler
    from gnnpar.shadow import DeviceShadow
    from gnnpar.train.config import ModelConfig

    sums = dict.fromkeys(("load_syncs", "load_collectives", "step_syncs",
                          "step_collectives"), 0.0)
    with DeviceShadow() as shadow:
        ctx = gnnpar.init(device=shadow.device)
        graph = gnnpar.DistGraph.load(part_dir, ctx, verify=False)
        sampler = DistNeighborSampler(graph, ctx, Fanouts.for_graph(fanouts, graph, ctx))
        loader = gnnpar.DistNeighborLoader(sampler, gnnpar.DistFeatureStore(graph, ctx),
                                           "train", batch_size=batch_size, prefetch=True)
        torch.manual_seed(0)
        model = build_model(ModelConfig(hidden=64, layers=len(fanouts)), graph.meta.feat_dim,
                            graph.meta.num_classes).to(ctx.device)
        ddp = DistributedDataParallel(SampledGNN(model))
        it = iter(loader)
        n = min(batches, len(loader) - 1)
        next(it)  # the first batch is not prefetched
        for _ in range(n):
            with shadow.window() as load:
                batch = next(it)
            with shadow.window() as step:
                loss = F.cross_entropy(forward_batch(ddp, batch), batch.y[: batch.batch_size])
                loss.backward()
            for name, w in (("load", load), ("step", step)):
                sums[f"{name}_syncs"] += w.num_syncs / n
                sums[f"{name}_collectives"] += len(w.collectives) / n
        gnnpar.shutdown()
    return sums


def sync_budget(part_dir: str, world_size: int, fanouts: list[int], batch_size: int,
                batches: int = 5) -> dict[str, float]:
    """:func:`budget_worker`'s figures averaged over ``world_size`` gloo ranks."""
    from gnnpar.testing import run_multiproc

    ranks = run_multiproc(budget_worker, world_size, part_dir, fanouts, batch_size, batches,
                          env={"OMP_NUM_THREADS": "1"}, timeout=1800)
    return {k: sum(r[k] for r in ranks) / world_size for k in ranks[0]}


def command(name: str) -> list[str]:
    """A gnnpar console script (``gnnpar-train``, ...) as installed, else its entry point
    called by this Python (a wheel unpacked without pip has no scripts)."""
    exe = shutil.which(name)
    if exe:
        return [exe]
    (entry,) = entry_points(group="console_scripts", name=name)
    return [sys.executable, "-c", f"import sys; from {entry.module} import {entry.attr}; "
            f"sys.argv[0] = {name!r}; sys.exit({entry.attr}())"]


def train_record(flags: list[str], out: Path, env: dict[str, str] | None = None
                 ) -> dict[str, Any]:
    """Run ``gnnpar-train FLAGS --out OUT --no-progress`` and return its run record."""
    cmd = [sys.executable, "-m", "gnnpar.train", *flags, "--out", str(out), "--no-progress"]
    subprocess.run(cmd, check=True, capture_output=True, text=True,
                   env={**os.environ, **(env or {})})
    record: dict[str, Any] = json.loads((out / "record.json").read_text())
    return record


@dataclass
class Outcome:
    """How a bounded command ended (:func:`run_bounded`).

    Attributes:
        status: ``ok`` (exit 0), ``failed`` (another exit), ``timeout`` or ``stopped``
            (killed when asked to).
        rc: Exit status (negative: the signal that killed it).
        wall_s: Seconds from start to exit.
        cpu_s: CPU seconds of the command and the processes it waited for (user + system).
        tail: The last lines of its output.
    """

    status: str
    rc: int
    wall_s: float
    cpu_s: float
    tail: str


_LIVE: set[int] = set()
"""Sessions of the commands :func:`run_bounded` is running now (their process group ids)."""


def stop_on_sigterm() -> None:
    """On SIGTERM (``timeout`` ending this script), SIGKILL every running command's session,
    then exit with 124: what the results files hold so far stays as written."""

    def handler(signum: int, frame: Any) -> None:
        for pgid in list(_LIVE):
            with suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        os._exit(124)

    signal.signal(signal.SIGTERM, handler)


def run_bounded(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float,
                log: Path, stop: Callable[[], bool] | None = None,
                tail_lines: int = 25) -> Outcome:
    """Run ``cmd`` in a session of its own, its output into ``log``, for at most ``timeout_s``.

    At the timeout, or as soon as ``stop()`` returns true (polled every 10 ms), the whole
    session (the launcher and every rank it started) is killed with SIGKILL; whatever of
    that session outlives its leader is killed too.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        _LIVE.add(proc.pid)
        status = ""
        while True:
            pid, code, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            late = time.monotonic() - t0 > timeout_s
            if late or (stop is not None and stop()):
                status = "timeout" if late else "stopped"
                os.killpg(proc.pid, signal.SIGKILL)
                pid, code, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        proc.returncode = os.waitstatus_to_exitcode(code)
        with suppress(ProcessLookupError):  # a rank left behind by its launcher
            os.killpg(proc.pid, signal.SIGKILL)
        _LIVE.discard(proc.pid)
    lines = log.read_text(errors="replace").splitlines()
    return Outcome(status or ("ok" if proc.returncode == 0 else "failed"), proc.returncode,
                   time.monotonic() - t0, usage.ru_utime + usage.ru_stime,
                   "\n".join(lines[-tail_lines:]))
