"""Dataset spec strings and ``python -m gnnpar.datasets``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.spec import DEFAULT_SPEC, load_dataset, parse_synthetic
from gnnpar.datasets.synthetic import rmat, sbm
from gnnpar.errors import DatasetError

SMALL = "synthetic:sbm?nodes=300&avg_degree=4&classes=3&feat_dim=5&seed=2"


def test_parse_synthetic_converts_types_and_aliases() -> None:
    name, kw = parse_synthetic("synthetic:rmat?nodes=100&avg_degree=3.5&classes=4&feat_dim=2"
                               "&seed=7&a=0.6&split=0.5,0.3,0.2")
    assert name == "rmat"
    assert kw == {"num_nodes": 100, "avg_degree": 3.5, "num_classes": 4, "feat_dim": 2,
                  "seed": 7, "a": 0.6, "split": (0.5, 0.3, 0.2)}
    assert isinstance(kw["num_nodes"], int) and isinstance(kw["avg_degree"], float)
    assert parse_synthetic("synthetic:sbm?num_nodes=10") == ("sbm", {"num_nodes": 10})


def test_synthetic_specs_equal_the_generator_calls() -> None:
    ds = load_dataset(SMALL)
    ref = sbm(num_nodes=300, avg_degree=4, num_classes=3, feat_dim=5, seed=2)
    for fld in ("src", "dst", "x", "y", "train_idx"):
        np.testing.assert_array_equal(getattr(ds, fld), getattr(ref, fld))
    assert DEFAULT_SPEC == "synthetic:sbm"
    ref = rmat(num_nodes=256, num_classes=4)
    np.testing.assert_array_equal(load_dataset("synthetic:rmat?nodes=256&classes=4").src, ref.src)


@pytest.mark.parametrize(("spec", "field", "needle"), [
    ("synthetic:sbm?nodez=5", "nodez", "nodes, avg_degree, classes, feat_dim, seed"),
    ("synthetic:rmat?homophily=0.5&q=1", "q", "a, b, c"),
    ("synthetic:sbm?nodes=ten", "nodes", "nodes=32768"),
    ("synthetic:sbm?split=0.5", "split", "3 fractions"),
    ("synthetic:sbm?seed=1&seed=2", "seed", "once"),
    ("synthetic:sbm?nodes", "query", "key=value"),
    ("synthetic:ba?nodes=5", "generator", "rmat"),
    ("synthetic:typed?venues=2", "num_venues", ">= 6"),
])
def test_bad_specs(spec: str, field: str, needle: str) -> None:
    with pytest.raises(DatasetError) as exc:
        load_dataset(spec)
    assert exc.value.field == field and needle in str(exc.value), str(exc.value)


def test_path_specs(tmp_path: Path) -> None:
    ref = load_dataset(SMALL)
    ref.save(tmp_path / "saved")
    for spec in (tmp_path / "saved", tmp_path / "saved" / "dataset.json"):
        back = load_dataset(str(spec))
        assert isinstance(back.src, np.memmap)
        np.testing.assert_array_equal(back.x, ref.x)
    np.savez(tmp_path / "g.npz", src=ref.src, dst=ref.dst, x=ref.x)
    np.testing.assert_array_equal(load_dataset(str(tmp_path / "g.npz")).dst, ref.dst)
    (tmp_path / "g.tsv").write_text("0\t1\n1\t2\n")
    assert load_dataset(str(tmp_path / "g.tsv")).num_edges == 2


@pytest.mark.parametrize(("name", "field"), [("nothing.csv", "spec"), ("g.parquet", "spec"),
                                             ("emptydir", "spec")])
def test_unresolvable_paths(tmp_path: Path, name: str, field: str) -> None:
    (tmp_path / "g.parquet").write_text("x")
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(DatasetError) as exc:
        load_dataset(str(tmp_path / name))
    assert exc.value.field == field and name in str(exc.value)
    assert "synthetic:sbm" in str(exc.value)  # the fix lists the accepted forms


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gnnpar.datasets", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_prints_statistics_and_saves(tmp_path: Path) -> None:
    out = tmp_path / "saved"
    res = run_cli(SMALL, "--save", str(out))
    assert res.returncode == 0, res.stderr
    table = dict(line.split(None, 1) for line in res.stdout.splitlines()[:-1])
    ds = GraphDataset.load(out)
    assert table["num_nodes"] == "300" and table["num_edges"] == f"{ds.num_edges:,}"
    assert table["feat_dim"] == "5" and table["num_classes"] == "3"
    again = run_cli(SMALL, "--save", str(out))
    assert again.returncode == 2 and str(out) in again.stderr and "--overwrite" in again.stderr
    assert run_cli(str(out), "--save", str(out), "--overwrite").returncode == 0
    bad = run_cli("synthetic:sbm?bogus=1")
    assert bad.returncode == 2 and "bogus" in bad.stderr and "Traceback" not in bad.stderr
