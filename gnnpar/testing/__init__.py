"""Run a function on N real processes over gloo on loopback, for tests and examples.

Beside it, :class:`~gnnpar.shadow.DeviceShadow` runs gnnpar's device code path on the CPU
under CUDA's rules (see :mod:`gnnpar.shadow`).

:func:`run_multiproc` is what every multi-rank test uses: the parent hosts the
rendezvous store on a free loopback port and starts ``world_size`` spawned processes with
the environment of :mod:`gnnpar.train.launch` (as ``gnnpar-train --nproc`` does), and
returns each rank's return value (through a queue, unlike the launcher).  A rank
that raises sends its traceback back to the parent, which re-raises it with the rank named;
a rank that hangs is killed at ``timeout`` seconds.

Timeouts of tests are a generous base times :func:`slowdown`, the machine's load per core
when the run starts (at least 1): a loaded machine makes the tests slower, not failed.
The ranks see the same factor (``GNNPAR_TEST_SLOWDOWN``), so their own timeouts
(:func:`scaled`) follow it.

The tests and the benchmarks share the modules beside it: :mod:`gnnpar.testing.reference`
and :mod:`gnnpar.testing.typed_reference` (single-process PyG references, no gnnpar
runtime), :mod:`gnnpar.testing.procs` (a run's processes seen from outside) and
:mod:`gnnpar.testing.conformance` (the commands' conformance harness).
"""

from __future__ import annotations

import os
import queue
import time
import traceback
import unittest
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils._pytree import tree_map

from gnnpar.errors import DistributedError
from gnnpar.train.launch import loopback_store, worker_env

__all__ = ["run_multiproc"]


class _ByValue:
    """A tensor sent to the parent as a numpy copy.

    Tensors sent through a queue live in shared memory that vanishes when the child exits.
    """

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


def _tensors_to(tree: Any, kind: type, convert: Callable[[Any], Any]) -> Any:
    return tree_map(lambda v: convert(v) if isinstance(v, kind) else v, tree)


def _child(
    rank: int,
    world_size: int,
    port: int,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    env: dict[str, str],
    results: Any,
) -> None:
    os.environ.update(env)
    os.environ.update(worker_env(rank, world_size, port, int(env.get("OMP_NUM_THREADS", "1"))))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    try:
        out = _tensors_to(fn(*args), torch.Tensor, lambda t: _ByValue(t.detach().cpu().numpy()))
        try:
            ForkingPickler.dumps(out)
        except Exception as exc:  # reported instead of a silent hang
            raise TypeError(
                f"the worker's return value cannot be sent to the parent: {exc}"
            ) from exc
        results.put((rank, True, out))
    except BaseException as exc:  # noqa: BLE001 - forwarded to the parent verbatim
        results.put((rank, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - peers may already be gone
                pass


SLOWDOWN_ENV = "GNNPAR_TEST_SLOWDOWN"
"""Environment variable that fixes :func:`slowdown` (set by :func:`run_multiproc`)."""


def slowdown() -> float:
    """How many times slower than idle this machine runs now (at least 1).

    ``GNNPAR_TEST_SLOWDOWN`` when set, else the 1-minute load average per core: with 40
    runnable processes on 2 cores each gets a twentieth of a core, and every timeout of a
    test should stretch as much.
    """
    fixed = os.environ.get(SLOWDOWN_ENV)
    if fixed:
        return max(1.0, float(fixed))
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def scaled(seconds: float) -> float:
    """``seconds`` times :func:`slowdown`: a test timeout that holds on a loaded machine."""
    return seconds * slowdown()


def run_multiproc(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 600.0,
    env: dict[str, str] | None = None,
    expect_failure: bool = False,
    device: str = "cpu",
) -> list[Any]:
    """Run ``fn(*args)`` on ``world_size`` processes and collect their results.

    ``fn`` must be importable by name (a module-level function) and calls
    :func:`gnnpar.distributed.init` itself, exactly as a torchrun worker would.  The
    ranks are pinned to ``device``: on ``"cpu"`` they see no GPU
    (``CUDA_VISIBLE_DEVICES=""``), so ``init()`` chooses gloo on the CPU on any machine;
    on ``"cuda"`` rank ``r`` gets GPU ``r`` (its ``LOCAL_RANK``) and NCCL, and the call
    raises :class:`unittest.SkipTest` (a skip under pytest) when there are fewer GPUs
    than ranks.

    Args:
        fn: Worker function.
        world_size: Number of processes.
        *args: Positional arguments for ``fn`` (picklable).
        timeout: Seconds after which hung ranks are killed and an error is raised, on an
            idle machine: times :func:`slowdown` (measured here, and handed to the ranks).
        env: Extra environment variables for the workers.
        expect_failure: Return each rank's outcome instead of raising on the first
            failure: a list of ``(ok, value_or_traceback)`` pairs, ``None`` for a rank
            that neither returned nor raised (killed at the timeout or died).
        device: ``"cpu"`` or ``"cuda"``: what the ranks run on.

    Returns:
        ``fn``'s return value of each rank, in rank order (tensors on the CPU).
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    env = dict(env or {})
    factor = slowdown()
    env.setdefault(SLOWDOWN_ENV, f"{factor:.3f}")
    timeout *= factor
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < world_size:
            raise unittest.SkipTest(f"needs {world_size} CUDA devices, this machine has {have}")
    ctx = mp.get_context("spawn")
    store = loopback_store(world_size)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_child,
            args=(r, world_size, store.port, fn, args, env, results),
            daemon=True,
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    outcomes: dict[int, tuple[bool, Any]] = {}

    deadline = time.monotonic() + timeout
    while len(outcomes) < world_size and time.monotonic() < deadline:
        try:
            rank, ok, value = results.get(timeout=0.2)
            outcomes[rank] = (ok, value)
            continue
        except queue.Empty:
            pass
        dead = [r for r, p in enumerate(procs) if not p.is_alive() and r not in outcomes]
        if dead:
            # Drain what is already queued before judging a rank as died-silently.
            try:
                while True:
                    rank, ok, value = results.get(timeout=0.5)
                    outcomes[rank] = (ok, value)
            except queue.Empty:
                pass
            for r in dead:
                if r not in outcomes and procs[r].exitcode not in (None, 0):
                    outcomes[r] = (False, f"rank {r} exited with code {procs[r].exitcode}")
        if not expect_failure and any(not ok for ok, _ in outcomes.values()):
            break
    if not expect_failure and any(not ok for ok, _ in outcomes.values()):
        # Give peers a moment to report their own (secondary) errors, then stop them.
        time.sleep(0.5)
    for p in procs:
        p.join(timeout=1.0 if len(outcomes) == world_size else 0.1)
        if p.is_alive():
            p.kill()
            p.join()
    del store
    outcomes = {
        r: (ok, _tensors_to(v, _ByValue, lambda b: torch.from_numpy(b.array)))
        for r, (ok, v) in outcomes.items()
    }
    if expect_failure:
        return [outcomes.get(r) for r in range(world_size)]
    # dicts keep arrival order: the first rank to fail is usually the root cause, and
    # the others fail because it left.
    failed = [r for r, (ok, _) in outcomes.items() if not ok]
    if failed:
        r = failed[0]
        others = f" (then ranks {failed[1:]} failed too)" if len(failed) > 1 else ""
        raise DistributedError(f"rank {r} of {world_size} failed{others}:\n{outcomes[r][1]}")
    missing = [r for r in range(world_size) if r not in outcomes]
    if missing:
        raise DistributedError(f"ranks {missing} of {world_size} did not finish in "
                               f"{timeout:.0f} s (slowdown {factor:.1f})")
    return [outcomes[r][1] for r in range(world_size)]
