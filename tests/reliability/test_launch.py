"""``gnnpar-train --nproc``: loopback only, one short error naming the rank, no rank left.

Each test runs the real command in a subprocess and acts on its processes from outside —
a corrupted part, a rank killed mid-run, Ctrl-C — as a user or a cluster would.  A hung
rank, in every mode, is ``test_hang_bound.py``'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gnnpar.testing import scaled
from gnnpar.testing.procs import descendants, exe, listeners, rank_pid, start, wait_for_epochs
from gnnpar.train.cli import parse
from gnnpar.train.prepare import resolve_partition

TINY = "synthetic:sbm?nodes=1500&feat_dim=16&classes=4&seed=2&homophily=0.8"
RUN = ["--mode", "full", "--model", "gcn", "--hidden", "16", "--no-progress"]


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("launch-data")
    return resolve_partition(parse([TINY, "--root", str(root)]), 2)


def test_nothing_listens_beyond_loopback(parts: Path, tmp_path: Path) -> None:
    proc = start(str(parts), *RUN, "--epochs", "400", "--nproc", "2", "--out",
                  str(tmp_path / "run"), cwd=tmp_path)
    seen: set[str] = set()
    try:
        wait_for_epochs(tmp_path / "run" / "record.json", 1, proc, scaled(120))
        for _ in range(20):  # the store, and each rank's gloo pairs
            seen.update(listeners([proc.pid, *descendants(proc.pid)]))
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert seen, "found no listening socket at all"
    loopback = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1
    assert seen <= loopback, seen


def test_a_damaged_part_is_one_line_naming_the_rank(parts: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(parts, bad)
    feat = bad / "part-1" / "feat.npy"
    data = bytearray(feat.read_bytes())
    data[-1] ^= 0xFF
    feat.write_bytes(bytes(data))
    proc = subprocess.run([*exe(), str(bad), *RUN, "--nproc", "2", "--out",
                           str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=scaled(300))
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if "error:" in ln]  # beside the log
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("gnnpar-train: error: rank 1 of 2: ")
    assert "part-1/feat.npy" in lines[0] and "sha256 differs" in lines[0]


@pytest.mark.parametrize("mode", ["full", "sample"])
def test_a_dead_rank_ends_the_run(parts: Path, tmp_path: Path, mode: str) -> None:
    flags = RUN if mode == "full" else ["--mode", "sample", "--hidden", "16", "--fanouts",
                                        "5,5", "--batch-size", "64", "--no-progress"]
    # A killed rank is seen at once; the collective timeout only has to survive the load.
    proc = start(str(parts), *flags, "--epochs", "100000", "--checkpoint-every", "1000",
                 "--timeout-s", str(round(scaled(30))), "--nproc", "2", "--out",
                 str(tmp_path / "run"), cwd=tmp_path)
    try:
        wait_for_epochs(tmp_path / "run" / "record.json", 2, proc, scaled(120))
        victim = rank_pid(proc.pid, 1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=scaled(120))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, err
    assert not descendants(proc.pid)  # no rank left behind
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(lines) == 1, err
    assert "rank 1 of 2: killed by signal 9 (SIGKILL)" in lines[0], err


@contextlib.contextmanager
def _endless_run(parts: Path, tmp_path: Path, epochs: int
                 ) -> Iterator[tuple[subprocess.Popen[str], Path, list[int]]]:
    """``gnnpar-train --nproc 2`` for 3,000 epochs once ``epochs`` are recorded: the
    launcher, the run directory and the ranks' pids (the launcher killed at the end)."""
    run = tmp_path / "run"
    proc = start(str(parts), *RUN, "--epochs", "3000", "--nproc", "2", "--out", str(run),
                 cwd=tmp_path)
    try:
        wait_for_epochs(run / "record.json", epochs, proc, scaled(120))
        ranks = [rank_pid(proc.pid, r) for r in range(2)]
        assert None not in ranks
        yield proc, run, [r for r in ranks if r is not None]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_ctrl_c_stops_every_rank_and_says_how_to_resume(parts: Path, tmp_path: Path) -> None:
    with _endless_run(parts, tmp_path, 3) as (proc, run, ranks):
        # Each rank leads a session of its own (as torchrun's workers do: the kernel shares
        # the CPU between sessions first), out of the terminal's process group.
        assert all(os.getsid(r) == r != os.getsid(proc.pid) for r in ranks), ranks
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends
        _, err = proc.communicate(timeout=scaled(60))
    assert proc.returncode == 130, err
    assert "Traceback" not in err and not descendants(proc.pid)
    hint = err.strip().splitlines()[-1]
    assert "interrupted, every worker stopped" in hint and "--resume" in hint, err
    assert json.loads((run / "record.json").read_text())["status"] in ("interrupted", "running")
    # The printed command continues the run (with fewer epochs to go, for the test).
    command = shlex.split(hint.split("continue with: ", 1)[1])
    done = json.loads((run / "checkpoint" / "state.json").read_text())
    finished = len(done["state"]["extra"]["epochs"])
    resumed = subprocess.run([*exe(), *command[1:], "--epochs", str(finished + 2)],
                             capture_output=True, text=True, timeout=scaled(300), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    record = json.loads((run / "record.json").read_text())
    assert [e["epoch"] for e in record["epochs"]] == list(range(finished + 2))
    assert record["status"] == "complete"


def test_a_killed_launcher_takes_every_rank_with_it(parts: Path, tmp_path: Path) -> None:
    with _endless_run(parts, tmp_path, 2) as (proc, _, ranks):
        proc.kill()  # SIGKILL: the launcher cannot pass anything on
        proc.communicate(timeout=scaled(60))
        end = time.monotonic() + scaled(30)
        while any(_alive(r) for r in ranks) and time.monotonic() < end:
            time.sleep(0.05)
        assert not any(_alive(r) for r in ranks), ranks


def _alive(pid: int) -> bool:
    """``pid`` runs and is no zombie (a rank reaped by init once it is gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_under_torchrun_an_error_prints_once(parts: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         "2", "-m", "gnnpar.train", str(parts), *RUN, "--fanouts", "5,5"],
        capture_output=True, text=True, timeout=scaled(300), cwd=tmp_path)
    assert proc.returncode != 0
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("gnnpar-train: error:")]
    assert len(ours) == 1 and "--fanouts" in ours[0], proc.stderr


def test_under_torchrun_a_spec_is_never_partitioned_while_others_wait(tmp_path: Path) -> None:
    # No rank may sit in a collective while another partitions: the spec is refused at
    # once with the command that partitions it, and that command makes the rerun work.
    spec = "synthetic:sbm?nodes=900&feat_dim=8&classes=3&seed=4"
    train = [spec, "--root", str(tmp_path / "data"), "--undirected", *RUN,
             "--epochs", "1", "--timeout-s", str(round(scaled(30)))]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", "2", "-m", "gnnpar.train"]
    proc = subprocess.run([*torchrun, *train, "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=scaled(300), cwd=tmp_path)
    assert proc.returncode != 0
    assert not (tmp_path / "data" / "partitions").exists()  # nothing was partitioned
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("gnnpar-train: error:")]
    assert len(ours) == 1 and "no partition into 2 parts" in ours[0], proc.stderr
    command = ours[0].split("`")[1]
    assert command.startswith("gnnpar-partition ") and "--undirected" in command
    argv = shlex.split(command)
    made = subprocess.run([sys.executable, "-m", "gnnpar.partition", *argv[1:], "--no-progress"],
                          capture_output=True, text=True, timeout=scaled(300), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    again = subprocess.run([*torchrun, *train, "--out", str(tmp_path / "run")],
                           capture_output=True, text=True, timeout=scaled(300), cwd=tmp_path)
    assert again.returncode == 0, again.stderr


def test_the_readme_recipe_for_two_machines_shares_one_machine_s_cores(
        parts: Path, tmp_path: Path) -> None:
    # The README's multi-machine recipe on one host as 2 nodes: two torchrun agents of one
    # worker each, c10d rendezvous.  torchrun gives each worker torch's default threads
    # (every core); the workers must take one share each, as under --nproc 2.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tmp_path / "run"
    node = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
            "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
            f"127.0.0.1:{port}", "--rdzv-id", "readme", "-m", "gnnpar.train", str(parts),
            *RUN, "--epochs", "1", "--out", str(run)]
    procs = [subprocess.Popen(node, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=tmp_path) for _ in range(2)]
    outs = [p.communicate(timeout=scaled(300)) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "node_rank is only used" not in "".join(err for _, err in outs)
    record = json.loads((run / "record.json").read_text())
    assert record["env"]["torch_threads"] == max(1, len(os.sched_getaffinity(0)) // 2)
    assert "total wall time:" in "".join(out for out, _ in outs)  # rank 0's summary
