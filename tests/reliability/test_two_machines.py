"""A rank of a second (simulated) machine dies or hangs: the first machine ends, naming it.

Two ``torchrun`` agents on loopback stand for two machines (``--nnodes 2``, static
rendezvous, one worker each).  The second machine's worker is killed (SIGKILL) or
stopped (SIGSTOP) once training runs; the first machine's agent must exit non-zero
within the documented 1.5 collective timeouts, its error naming rank 1.  (The second
machine's agent stops its own worker on its own timing; the test prints when.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _procs import rank_pid, wait_for_epochs

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
