"""Outputs: one writer at a time, nothing foreign replaced, a full disk loses nothing.

Two ``gnnpar-partition`` runs to one new ``--out`` at once: exactly one writes it and the
other exits 1 (it found the directory being written, or written).  ``--overwrite`` never
replaces a directory that is not a partition.  What a killed writer left behind is
cleaned by the next write.  A disk that fills while partitioning gives one error naming
the output, and the previous partition is intact.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import gnnpar.partition.writer as writer
from gnnpar.artifacts.lock import holder, lock, lock_path
from gnnpar.datasets.synthetic import sbm
from gnnpar.errors import PartitionError
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.verify import verify_partition
from gnnpar.partition.writer import partition_graph

SPEC = "synthetic:sbm?nodes=20000&avg_degree=8&classes=4&feat_dim=32&seed=1"


def _partition_cmd() -> list[str]:
    exe = shutil.which("gnnpar-partition")
    return [exe] if exe else [sys.executable, "-m", "gnnpar.partition"]


def test_two_writers_of_one_output_one_wins(tmp_path: Path) -> None:
    out = tmp_path / "parts"
    procs = [subprocess.Popen([*_partition_cmd(), SPEC, "--num-parts", "2", "--out", str(out),
                               "--no-progress"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read() if p.stderr else "") for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    loser = next(err for code, err in results if code == 1)
    winner = next(p.pid for p, (code, _) in zip(procs, results, strict=True) if code == 0)
    # Refused while the winner wrote (naming it), or after it finished.
    assert str(out) in loser and (f"is writing this output right now: process {winner} "
                                  in loser or "already exists" in loser), loser
    verify_partition(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parts"]


def test_overwrite_never_replaces_a_foreign_directory(tmp_path: Path) -> None:
    victim = tmp_path / "results"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    proc = subprocess.run([*_partition_cmd(), SPEC, "--num-parts", "2", "--out", str(victim),
                           "--overwrite", "--no-progress"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and "not a partition directory" in proc.stderr
    assert (victim / "thesis.tex").read_text() == "years of work"
    ds = sbm(num_nodes=300, avg_degree=6, num_classes=3, feat_dim=4, seed=0)
    with pytest.raises(PartitionError, match="not a partition directory"):
        # the library refuses too
        partition_graph(ds, victim, PartitionConfig(num_parts=2), overwrite=True)
    assert sorted(p.name for p in victim.iterdir()) == ["thesis.tex"]


def test_a_killed_writers_leftovers_are_cleaned(tmp_path: Path) -> None:
    ds = sbm(num_nodes=300, avg_degree=6, num_classes=3, feat_dim=4, seed=0)
    left = tmp_path / ".parts.tmp-abc123"
    left.mkdir()
    (left / "meta.json").write_text("{}")
    (tmp_path / ".parts.lock").write_text("")  # a dead writer's lock: not held by anyone
    partition_graph(ds, tmp_path / "parts", PartitionConfig(num_parts=2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parts"]


def test_a_full_disk_keeps_the_previous_partition(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ds = sbm(num_nodes=300, avg_degree=6, num_classes=3, feat_dim=4, seed=0)
    out = tmp_path / "parts"
    partition_graph(ds, out, PartitionConfig(num_parts=2))
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    calls = {"n": 0}
    real = writer.save_npy_blocks

    def filling(*args: object, **kwargs: object) -> str:
        calls["n"] += 1
        if calls["n"] == 2:  # the second part's features
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(writer, "save_npy_blocks", filling)
    with pytest.raises(PartitionError, match="No space left on device") as exc:
        partition_graph(ds, out, PartitionConfig(num_parts=2, seed=5), overwrite=True)
    assert exc.value.path == str(out) and "free space" in exc.value.fix
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before and sorted(p.name for p in tmp_path.iterdir()) == ["parts"]
    verify_partition(out, ds)


def test_a_process_asking_who_holds_a_lock_never_refuses_a_writer(tmp_path: Path) -> None:
    # A process waiting for a shared cache asks who holds its lock every 0.2 s: a shared
    # flock held for a moment, which a writer taking the lock then must not mistake for
    # another writer.
    out = tmp_path / "cache"
    fd = os.open(lock_path(out), os.O_CREAT | os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # the asker, caught in the act
    threading.Timer(0.1, os.close, (fd,)).start()
    with lock(out, PartitionError):
        assert holder(out) is not None  # the writer holds it now
    assert holder(out) is None
    second = ("import sys; from gnnpar.artifacts.lock import lock\n"
              "try:\n    with lock(sys.argv[1]): pass\nexcept Exception as e: print(e)\n")
    with lock(out, PartitionError):  # a real second writer (another process) is refused
        said = subprocess.run([sys.executable, "-c", second, str(out)], capture_output=True,
                              text=True, timeout=120)
    assert "right now" in said.stdout, said.stdout + said.stderr
    with lock(out, PartitionError), lock(out, PartitionError):  # re-entrant in one process
        assert holder(out) is not None
    assert holder(out) is None
