"""Elastic training: a killed or stopped rank is restarted and the run ends as if never hit.

Each test runs ``gnnpar-train --nproc 2 --max-restarts 1`` as a user would, hits one rank
from outside once training runs — SIGKILL at a random moment, or SIGSTOP past the
collective timeout — and checks that the run finishes by itself with exactly one
restart recorded (when, which rank, why, the checkpoint resumed from, the steps redone,
at most one checkpoint interval) and final weights bit-identical to an uninterrupted run
of the same command (the reference, run once per mode).  A last case kills rank 0 inside
its third checkpoint write (an audit hook of the process, at the open of the new
``state.json``): the restart resumes from the second, the complete one.

Also: a user error (a damaged part) is not restarted, the flag is torchrun's under
torchrun, and after N restarts the run stops with today's error.  The sampled mode's kill,
the kill during a write and the two refusals run in the default suite (about 1.5 minutes
on 2 cores at load 10); the other modes, SIGSTOP and the exhausted restarts with
``-m slow``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
import torch

from gnnpar.testing import scaled
from gnnpar.testing.procs import descendants, exe, rank_pid, start, wait_for_epochs
from gnnpar.train.checkpoint import read_model_state
from gnnpar.train.cli import main, parse
from gnnpar.train.prepare import resolve_partition
from tests.reliability.test_hang_bound import MODES as HANG_MODES

MODES = {mode: (spec, [*flags, "--checkpoint-steps", "3"] if mode != "full" else flags)
         for mode, (spec, flags) in HANG_MODES.items() if mode != "grid"}
"""The hang-bound test's modes, with a checkpoint every 3 steps in the sampled ones."""
EPOCHS = 6
SPEC = HANG_MODES["full"][0]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("restart-data")


_REFERENCES: dict[str, Path] = {}


def _command(root: Path, mode: str, out: Path, *extra: str) -> list[str]:
    spec, flags = MODES[mode]
    parts = resolve_partition(parse([spec, "--root", str(root), *flags]), 2)
    return [str(parts), *flags, "--hidden", "16", "--no-progress", "--epochs", str(EPOCHS),
            "--threads", "1", "--nproc", "2", "--out", str(out), *extra]


def reference(root: Path, mode: str) -> Path:
    """The uninterrupted run of ``mode`` (once per session)."""
    if mode not in _REFERENCES:
        out = root / f"reference-{mode}"
        done = subprocess.run([*exe(), *_command(root, mode, out)], capture_output=True,
                              text=True, timeout=scaled(600), cwd=root)
        assert done.returncode == 0, done.stderr[-3000:]
        _REFERENCES[mode] = out
    return _REFERENCES[mode]


def _same_weights(a: Path, b: Path) -> None:
    mine, theirs = read_model_state(a / "checkpoint"), read_model_state(b / "checkpoint")
    assert mine.keys() == theirs.keys()
    for key, value in theirs.items():
        assert torch.equal(mine[key], value), key


def _finish(proc: subprocess.Popen[str], limit: float) -> str:
    try:
        _, err = proc.communicate(timeout=limit)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not descendants(proc.pid)
    return err


def _steps_per_epoch(run: Path) -> int:
    return int(json.loads((run / "record.json").read_text())["summary"]["steps_per_epoch"])


@pytest.mark.parametrize("mode,sig", [
    ("sample", signal.SIGKILL),
    *(pytest.param(m, s, marks=pytest.mark.slow) for m, s in (
        ("sample", signal.SIGSTOP), ("full", signal.SIGKILL), ("full", signal.SIGSTOP),
        ("link", signal.SIGKILL), ("link", signal.SIGSTOP), ("typed", signal.SIGKILL),
        ("typed", signal.SIGSTOP)))], ids=lambda v: getattr(v, "name", v))
def test_a_lost_rank_is_restarted_and_the_run_ends_as_an_uninterrupted_one(
        root: Path, tmp_path: Path, mode: str, sig: int) -> None:
    ref = reference(root, mode)
    rng = random.Random(f"{mode}-{sig}")
    victim_rank = rng.randrange(2)
    timeout_s = round(scaled(10.0), 1)
    out = tmp_path / "run"
    proc = start(*_command(root, mode, out, "--max-restarts", "1", "--timeout-s",
                           str(timeout_s)), cwd=tmp_path)
    try:
        wait_for_epochs(out / "record.json", 1, proc, scaled(300))
        # A random step of the epochs to come: within the next epoch, not after the last.
        first = json.loads((out / "record.json").read_text())["epochs"][0]["epoch_time_s"]
        time.sleep(rng.uniform(0.0, min(0.5, float(first))))
        victim = rank_pid(proc.pid, victim_rank)
        assert victim is not None
        os.kill(victim, sig)
    finally:
        err = _finish(proc, scaled(600))
    assert proc.returncode == 0, err[-3000:]
    record = json.loads((out / "record.json").read_text())
    assert record["status"] == "complete" and len(record["epochs"]) == EPOCHS
    [entry] = record["restarts"]
    assert entry["restart"] == 1 and entry["rank"] == victim_rank, entry
    assert ("SIGKILL" if sig == signal.SIGKILL else "heartbeats") in entry["reason"], entry
    interval = 1 if mode == "full" else 3  # --checkpoint-steps 3; full: one step an epoch
    assert entry["resumed_from"] is not None and 0 <= entry["steps_redone"] <= interval, entry
    assert entry["failed_at"] and entry["restart_s"] > 0 and entry["lost_s"] >= 0, entry
    _same_weights(out, ref)
    print(f"{mode} {signal.Signals(sig).name} rank {victim_rank}: restarted "
          f"{entry['restart_s']:.1f} s after the failure, {entry['steps_redone']} steps "
          f"({entry['lost_s']:.1f} s of training) redone")


KILL_AT_WRITE = textwrap.dedent("""
    import os, signal, sys

    if os.environ.get("RANK") == "0" and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
        seen = []

        def _kill_at_third_checkpoint(event, args):
            if event == "open" and args and ".checkpoint.tmp" in str(args[0]) \\
                    and str(args[0]).endswith("state.json"):
                seen.append(args[0])
                if len(seen) == 3:  # tensors.bin is written, state.json not yet
                    os.kill(os.getpid(), signal.SIGKILL)

        sys.addaudithook(_kill_at_third_checkpoint)
""")


def test_a_kill_during_a_checkpoint_write_resumes_from_the_complete_one(
        root: Path, tmp_path: Path) -> None:
    ref = reference(root, "sample")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_AT_WRITE)
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(hook), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen([*exe(), *_command(root, "sample", out, "--max-restarts", "1")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=env, start_new_session=True)
    err = _finish(proc, scaled(600))
    assert proc.returncode == 0, err[-3000:]
    # The checkpoints of --checkpoint-steps 3 and of every epoch's end, in order.
    steps = _steps_per_epoch(ref)
    saves = [(e, s) for e in range(EPOCHS) for s in range(3, steps, 3)] + \
        [(e + 1, 0) for e in range(EPOCHS)]
    saves.sort()
    [entry] = json.loads((out / "record.json").read_text())["restarts"]
    assert entry["rank"] == 0 and "SIGKILL" in entry["reason"], entry
    assert (entry["resumed_from"]["epoch"], entry["resumed_from"]["step"]) == saves[1], entry
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no half write
    _same_weights(out, ref)


def test_a_user_error_is_not_restarted(root: Path, tmp_path: Path) -> None:
    spec, flags = MODES["full"]
    bad = tmp_path / "bad"
    shutil.copytree(resolve_partition(parse([spec, "--root", str(root), *flags]), 2), bad)
    feat = bad / "part-1" / "feat.npy"
    data = bytearray(feat.read_bytes())
    data[-1] ^= 0xFF
    feat.write_bytes(bytes(data))
    done = subprocess.run([*exe(), str(bad), *flags, "--nproc", "2", "--max-restarts", "2",
                           "--out", str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=scaled(300), cwd=tmp_path)
    assert done.returncode == 1
    lines = [ln for ln in done.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1 and "part-1/feat.npy" in lines[0], done.stderr
    assert "restarting" not in done.stderr  # it would only repeat


def test_under_torchrun_the_flag_is_torchruns(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RANK", "0")
    assert main([SPEC, "--max-restarts", "2", "--out", "nowhere"]) == 1
    err = capsys.readouterr().err
    assert "error: run.max_restarts" in err and "torchrun --max-restarts" in err, err


@pytest.mark.slow
def test_after_n_restarts_the_run_stops_with_todays_error(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = start(*_command(root, "full", out, "--epochs", "100000", "--max-restarts", "1"),
                 cwd=tmp_path)
    try:
        for epochs in (1, 3):  # once, then again after the restart
            wait_for_epochs(out / "record.json", epochs, proc, scaled(300))
            if epochs == 3:
                deadline = time.monotonic() + scaled(120)
                while not json.loads((out / "record.json").read_text())["restarts"] \
                        and time.monotonic() < deadline:
                    time.sleep(0.2)
            victim = rank_pid(proc.pid, 1)
            assert victim is not None
            os.kill(victim, signal.SIGKILL)
            time.sleep(1.0)
    finally:
        err = _finish(proc, scaled(300))
    assert proc.returncode == 1, err[-3000:]
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(lines) == 1 and "rank 1 of 2: killed by signal 9 (SIGKILL)" in lines[0], err
    assert "no restart left (--max-restarts 1)" in err
    restarts = json.loads((out / "record.json").read_text())["restarts"]
    assert [r["restart"] for r in restarts] == [1, None], restarts  # the last one ended it
