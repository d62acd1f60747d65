"""Two (simulated) machines: a rank that dies or hangs is named; a machine that leaves
rejoins, or is named with the command that repartitions for the ranks that remain.

Two ``torchrun`` agents on loopback stand for two machines (``--nnodes 2``, static
rendezvous, one worker each).  The second machine's worker is killed (SIGKILL) or
stopped (SIGSTOP) once training runs; the first machine's agent must exit non-zero
within the documented 1.5 collective timeouts, its error naming rank 1.  (The second
machine's agent stops its own worker on its own timing; the test prints when.)

Elastic runs (``torchrun --nnodes 1:2 --rdzv-backend c10d --max-restarts 1``, every
endpoint on 127.0.0.1): the second machine's agent and worker are killed once training
runs; started again, it rejoins and the run ends with the weights of an uninterrupted
run and one restart recorded; not started again, the first machine continues alone after
the rendezvous's last call and stops with one error naming the part that has no rank and
the ``gnnpar-partition`` command for one rank.  About 1.5 minutes each: ``-m slow``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gnnpar.testing.procs import descendants, exe, rank_pid, wait_for_epochs
from gnnpar.train.checkpoint import read_model_state
from gnnpar.train.cli import parse
from gnnpar.train.prepare import resolve_partition

TINY = "synthetic:sbm?nodes=1500&feat_dim=16&classes=4&seed=2&homophily=0.8"
TIMEOUT_S = 20

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _machine(node: int, port: int, parts: Path, out: Path, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank",
         str(node), "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port",
         str(port), "-m", "gnnpar.train", str(parts), "--mode", "full", "--model", "gcn",
         "--hidden", "16", "--epochs", "100000", "--no-progress", "--timeout-s",
         str(TIMEOUT_S), "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
        start_new_session=True, env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"})


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "hung"])
def test_a_dead_or_hung_rank_on_another_machine_is_named(tmp_path: Path, sig: int) -> None:
    parts = resolve_partition(parse([TINY, "--root", str(tmp_path / "data")]), 2)
    port, out = _free_port(), tmp_path / "run"
    first = _machine(0, port, parts, out, tmp_path)
    second = _machine(1, port, parts, out, tmp_path)
    victim: int | None = None
    try:
        wait_for_epochs(out / "record.json", 2, first, limit=240)
        victim = rank_pid(second.pid, 1)
        assert victim is not None
        os.kill(victim, sig)
        hit = time.monotonic()
        first.wait(timeout=2 * TIMEOUT_S + 30)
        took = time.monotonic() - hit
        with contextlib.suppress(subprocess.TimeoutExpired):
            second.wait(timeout=120)
        whole = time.monotonic() - hit
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # torchrun starts each worker in its own session: a stopped victim outlives its
        # agent unless killed itself (it would stay stopped, holding its memory).
        if victim is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
    err = first.stderr.read() if first.stderr else ""
    assert first.returncode != 0
    ours = [ln for ln in err.splitlines() if ln.startswith("gnnpar-train: error:")]
    assert ours and "rank 1 of 2" in ours[0], err[-3000:]
    print(f"rank 1 {signal.Signals(sig).name}: reported after {took:.1f} s "
          f"({took / TIMEOUT_S:.2f} x --timeout-s); the second agent exited after {whole:.1f} s")
    assert took <= 1.5 * TIMEOUT_S, f"reported after {took:.0f} s"


# ------------------------------------------------------------------ elastic: c10d rendezvous
ELASTIC = ["--mode", "sample", "--fanouts", "5,5", "--batch-size", "64", "--checkpoint-steps",
           "3", "--hidden", "16", "--epochs", "6", "--threads", "1", "--no-progress",
           "--timeout-s", str(TIMEOUT_S)]


def _elastic_machine(name: str, port: int, parts: Path, out: Path, cwd: Path
                     ) -> subprocess.Popen[str]:
    """One machine's torchrun agent: c10d rendezvous on loopback, 1 to 2 machines.

    torch's shared agent store deadlocks a machine that joins a later round (the new
    agent waits for a MASTER_ADDR that the old rank 0 agent does not publish again), so
    elastic runs opt out of it (README, "Failures and restarts").
    """
    log = open(cwd / f"{name}.log", "w")  # noqa: SIM115 - the agent's lifetime
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1:2", "--nproc-per-node",
         "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id",
         "gnnpar-test", "--rdzv-conf", "last_call_timeout=5", "--local-addr", "127.0.0.1",
         "--max-restarts", "1", "--monitor-interval", "0.5", "-m", "gnnpar.train",
         str(parts), *ELASTIC, "--out", str(out)],
        stdout=log, stderr=log, text=True, cwd=cwd, start_new_session=True,
        env={**os.environ, "GLOO_SOCKET_IFNAME": "lo", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})


def _lose(machine: subprocess.Popen[str]) -> None:
    """The machine goes away: its agent and its worker, at once."""
    workers = descendants(machine.pid)
    os.killpg(machine.pid, signal.SIGKILL)
    for pid in workers:  # torchrun starts each worker in a session of its own
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    machine.wait()


@pytest.mark.parametrize("comes_back", [True, False], ids=["comes-back", "lost"])
def test_a_machine_that_leaves_rejoins_or_is_named(tmp_path: Path, comes_back: bool) -> None:
    parts = resolve_partition(parse([TINY, "--root", str(tmp_path / "data")]), 2)
    out = tmp_path / "run"
    if comes_back:  # the uninterrupted run of the same command
        ref = subprocess.run([*exe(), str(parts), *ELASTIC, "--nproc", "2", "--out",
                              str(tmp_path / "ref")], capture_output=True, text=True,
                             timeout=600, cwd=tmp_path)
        assert ref.returncode == 0, ref.stderr[-3000:]
    port = _free_port()
    first = _elastic_machine("first", port, parts, out, tmp_path)
    time.sleep(1.0)
    second = _elastic_machine("second", port, parts, out, tmp_path)
    machines = [first, second]
    try:
        wait_for_epochs(out / "record.json", 2, first, limit=240)
        _lose(second)
        if comes_back:  # the same machine again (a new agent, the same parts)
            machines.append(_elastic_machine("again", port, parts, out, tmp_path))
        first.wait(timeout=300)
        for m in machines[2:]:
            m.wait(timeout=120)
    finally:
        for m in machines:
            if m.poll() is None:
                _lose(m)
    err = (tmp_path / "first.log").read_text()
    record = json.loads((out / "record.json").read_text())
    if comes_back:
        assert first.returncode == 0 and machines[2].returncode == 0, err[-3000:]
        assert record["status"] == "complete" and len(record["epochs"]) == 6
        [entry] = record["restarts"]
        assert entry["restart"] == 1 and entry["resumed_from"] is not None, entry
        assert entry["rank"] == 1 and 0 <= entry["steps_redone"] <= 3, entry
        mine, theirs = (read_model_state(p / "checkpoint") for p in (out, tmp_path / "ref"))
        assert all(torch.equal(mine[k], v) for k, v in theirs.items())
    else:
        assert first.returncode != 0
        ours = [ln for ln in err.splitlines() if ln.startswith("gnnpar-train: error:")]
        assert ours, err[-3000:]
        assert "part 1 of 2 has no rank" in ours[-1], ours
        assert "gnnpar-partition DATASET --num-parts 1" in ours[-1], ours
