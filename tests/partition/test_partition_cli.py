"""The gnnpar-partition CLI, run as a subprocess (partition, verify, info, errors)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnpar.datasets.synthetic import sbm

SPEC = "synthetic:sbm?nodes=400&avg_degree=6&classes=4&feat_dim=4&seed=1"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("gnnpar-partition")
    cmd = [exe] if exe else [sys.executable, "-m", "gnnpar.partition"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_progress_bars_on_a_terminal_only(tmp_path: Path) -> None:
    """A terminal gets the partitioner's bars; a pipe (a log file) none (above)."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import termios

    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    exe = shutil.which("gnnpar-partition")
    cmd = [exe] if exe else [sys.executable, "-m", "gnnpar.partition"]
    proc = subprocess.run([*cmd, SPEC, "--num-parts", "2", "--out", str(tmp_path / "p")],
                          stdout=subprocess.PIPE, stderr=side, timeout=300)
    os.close(side)
    seen = b""
    while select.select([main], [], [], 1.0)[0]:
        try:
            chunk = os.read(main, 1 << 16)
        except OSError:  # the terminal closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(main)
    assert proc.returncode == 0
    assert b"assign (metis)" in seen and b"write" in seen, seen


def test_partition_verify_info(tmp_path: Path) -> None:
    out = tmp_path / "parts"
    r = cli(SPEC, "--num-parts", "3", "--out", str(out), "--halo-hops", "2",
            "--balance", "nodes,edges", "--partition-seed", "5")
    assert r.returncode == 0, r.stderr
    assert "edge cut:" in r.stdout and "max/mean" in r.stdout
    assert "assign (" not in r.stderr and "it/s" not in r.stderr  # no bars in a log
    meta = json.loads((out / "meta.json").read_text())
    assert meta["num_parts"] == 3 and meta["halo_hops"] == 2
    made = meta["partitioner"]
    assert {k: made[k] for k in ("method", "seed", "balance")} == {
        "method": "metis", "seed": 5, "balance": ["nodes", "edges"]}
    # The balancing pass records the max/mean it reached: counted here from the parts.
    owned = np.diff(meta["offsets"])
    edges = np.array([np.load(out / f"part-{k}" / "indptr.npy")[n] for k, n in enumerate(owned)])
    assert made["imbalance"] == pytest.approx(
        {"nodes": owned.max() / owned.mean(), "edges": edges.max() / edges.mean()}, abs=1e-6)
    assert max(made["imbalance"].values()) <= 1.05

    r = cli("verify", str(out), "--dataset", SPEC)
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout and "edges" in r.stdout

    r = cli("info", str(out))
    assert r.returncode == 0, r.stderr
    assert "3 parts" in r.stdout and "edge cut:" in r.stdout

    r = subprocess.run([sys.executable, "-m", "gnnpar.partition", "info", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "3 parts" in r.stdout


def test_errors_exit_1_with_the_fix(tmp_path: Path) -> None:
    out = tmp_path / "parts"
    out.mkdir()
    r = cli(SPEC, "--num-parts", "2", "--out", str(out), "--no-progress")
    assert r.returncode == 1
    assert "already exists" in r.stderr and "--overwrite" in r.stderr
    (out / "notes.txt").write_text("keep me")  # not a partition: --overwrite refuses it
    r = cli(SPEC, "--num-parts", "2", "--out", str(out), "--no-progress", "--overwrite")
    assert r.returncode == 1 and "not a partition directory" in r.stderr
    assert (out / "notes.txt").read_text() == "keep me"
    r = cli(SPEC, "--out", str(tmp_path / "other"), "--no-progress")
    assert r.returncode == 1 and "--num-parts" in r.stderr
    r = cli(SPEC, "--num-parts", "401", "--out", str(tmp_path / "other"), "--no-progress")
    assert r.returncode == 1 and "num_parts" in r.stderr and "1..400" in r.stderr
    r = cli(SPEC, "--num-parts", "2", "--out", str(tmp_path / "other"), "--no-progress",
            "--kaminpar-repeats", "0")
    assert r.returncode == 1 and "--kaminpar-repeats" in r.stderr, r.stderr
    assert not (tmp_path / "other").exists()
    r = cli("verify", str(tmp_path / "missing"))
    assert r.returncode == 1 and "does not exist" in r.stderr


@pytest.mark.parametrize("method", ["random", "contiguous"])
def test_dataset_directory_named_like_a_subcommand(tmp_path: Path, method: str) -> None:
    sbm(num_nodes=200, avg_degree=4, num_classes=2, feat_dim=2, seed=0).save(tmp_path / "verify")
    r = cli("verify", "--num-parts", "2", "--out", "parts", "--partitioner", method,
            "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "parts" / "meta.json").read_text())["partitioner"][
        "method"] == method
    r = cli("verify", "parts", "--dataset", "verify", cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_undirected_flag_adds_reverse_edges(tmp_path: Path) -> None:
    # A directed edge list with a duplicate and a self-loop; the undirected edge set,
    # counted by hand: {0-1, 1-2, 2-3} both ways plus the loop 3->3 once = 7 edges.
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n1 2\n2 3\n3 3\n")
    out = tmp_path / "parts"
    r = cli(str(edges), "--num-parts", "2", "--out", str(out), "--undirected", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "meta.json").read_text())["num_edges"] == 7
    r = cli("verify", str(out), "--dataset", str(edges), "--undirected")
    assert r.returncode == 0, r.stderr
    r = cli("verify", str(out), "--dataset", str(edges))
    assert r.returncode == 1  # the directed source no longer matches


def test_info_plot_draws_the_parts(tmp_path: Path) -> None:
    from matplotlib.image import imread

    out = tmp_path / "parts"
    assert cli(SPEC, "--num-parts", "3", "--out", str(out), "--no-progress").returncode == 0
    r = cli("info", str(out), "--plot", str(tmp_path / "parts.png"))
    assert r.returncode == 0, r.stderr
    image = imread(tmp_path / "parts.png")
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert (image[..., :3] < 0.9).any(axis=-1).mean() > 0.02  # not a blank page


def test_edge_list_with_features_labels_and_random_split(tmp_path: Path) -> None:
    ds = sbm(num_nodes=300, avg_degree=6, num_classes=3, feat_dim=4, seed=2)
    edges = tmp_path / "edges.csv"
    pairs = zip(ds.src, ds.dst, strict=True)
    edges.write_text("src,dst\n" + "".join(f"{s},{d}\n" for s, d in pairs))
    import numpy as np

    np.save(tmp_path / "x.npy", np.asarray(ds.x))
    (tmp_path / "y.csv").write_text("".join(f"{v}\n" for v in np.asarray(ds.y)))
    out = tmp_path / "parts"
    common = [str(edges), "--num-parts", "2", "--no-progress", "--features",
              str(tmp_path / "x.npy"), "--labels", str(tmp_path / "y.csv")]

    def sizes() -> tuple[int, int]:
        return tuple(sum(len(np.load(out / f"part-{k}" / f"{split}_idx.npy")) for k in range(2))
                     for split in ("train", "val"))  # type: ignore[return-value]

    r = cli(*common, "--out", str(out))  # labels but no split: --split's default, stated
    assert r.returncode == 0, r.stderr
    assert "no split, so a random split 0.6,0.2,0.2 of its 300 labelled nodes" in r.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["num_nodes"] == 300 and meta["feat_dim"] == 4 and meta["num_classes"] == 3
    assert sizes() == (180, 60)  # floor(0.6 * 300), floor(0.2 * 300)
    r = cli(*common, "--split", "0.5,0.25,0.25", "--split-seed", "4", "--out", str(out),
            "--overwrite")
    assert r.returncode == 0 and "no split" not in r.stderr, r.stderr
    assert sizes() == (150, 75)
