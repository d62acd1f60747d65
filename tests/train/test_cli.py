"""``gnnpar-train``: configuration from flags, validation, partition cache, a real launch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gnnpar.cli import build_parser, main, partition_cache_dir, resolve_partition
from gnnpar.config import Config, DataConfig, config_from_args, field_docs
from gnnpar.errors import ConfigError

TINY = "synthetic:sbm?nodes=1500&feat_dim=16&classes=4&seed=2"


def _cfg(*argv: str) -> Config:
    return config_from_args(build_parser().parse_args(list(argv)))


def test_defaults_and_flags() -> None:
    cfg = _cfg()
    assert cfg == Config()
    assert cfg.data.dataset == "synthetic:sbm" and cfg.data.num_parts is None
    cfg = _cfg("parts/x", "--model", "gat", "--fanouts", "15,10,5", "--layers", "3",
               "--batch-size", "256", "--epochs", "3", "--lr", "0.1", "--hidden", "64",
               "--dropout", "0.2", "--out", "r", "--resume", "--seed", "7", "--no-prefetch",
               "--num-parts", "4", "--checkpoint-steps", "5")
    assert cfg.data.dataset == "parts/x" and cfg.data.num_parts == 4
    assert (cfg.model.name, cfg.model.layers, cfg.model.hidden, cfg.model.dropout) == \
        ("gat", 3, 64, 0.2)
    t = cfg.train
    assert t.fanouts == (15, 10, 5) and t.batch_size == 256 and t.epochs == 3
    assert (t.lr, t.out, t.resume, t.seed, t.prefetch, t.checkpoint_steps) == \
        (0.1, "r", True, 7, False, 5)
    cfg.validate()


def test_every_field_has_a_docstring_shown_in_help() -> None:
    text = build_parser().format_help()
    for section in (Config, *[type(v) for v in vars(Config()).values()]):
        docs = field_docs(section)
        assert set(docs) == set(section.__dataclass_fields__), section
    assert "Seed nodes per step on each rank" in text and "--fanouts" in text


@pytest.mark.parametrize("argv,field,flag", [
    (["--batch-size", "0"], "train.batch_size", "--batch-size"),
    (["--fanouts", "10,0"], "train.fanouts", "--fanouts"),
    (["--fanouts", "10"], "train.fanouts", "--fanouts"),
    (["--epochs", "-1"], "train.epochs", "--epochs"),
    (["--model", "gin"], "model.name", "--model"),
    (["--model", "gat", "--hidden", "30", "--heads", "4"], "model.hidden", "--hidden"),
    (["--dropout", "1.0"], "model.dropout", "--dropout"),
    (["--lr", "0"], "train.lr", "--lr"),
    (["--partitioner", "kl"], "data.partitioner", "--partitioner"),
])
def test_validation_names_field_and_flag(argv: list[str], field: str, flag: str) -> None:
    with pytest.raises(ConfigError) as info:
        _cfg(*argv).validate()
    assert info.value.field == field
    assert flag in str(info.value)


def test_bad_flag_value_exits_before_launch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--batch-size", "0", "--nproc", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gnnpar-train: error: train.batch_size: got 0")
    assert main(["--num-parts", "3", "--nproc", "2", "--root", "unused"]) == 1
    assert "--num-parts 3 with 2 processes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--fanouts", "ten"])


def test_partition_cache_is_reused(tmp_path: Path) -> None:
    data = DataConfig(dataset=TINY, root=str(tmp_path))
    out = resolve_partition(data, 2, create=True)
    assert out == partition_cache_dir(data, 2) and (out / "meta.json").is_file()
    stamp = (out / "meta.json").stat().st_mtime_ns
    assert resolve_partition(data, 2, create=True) == out
    assert (out / "meta.json").stat().st_mtime_ns == stamp
    assert partition_cache_dir(data, 4) != out
    # A partition directory is used as it is.
    assert resolve_partition(DataConfig(dataset=str(out)), 2, create=True) == out


def test_undirected_partition_is_cached_apart(tmp_path: Path) -> None:
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 3\n3 0\n")  # a directed 4-cycle
    directed = resolve_partition(DataConfig(dataset=str(edges), root=str(tmp_path)), 2, True)
    data = DataConfig(dataset=str(edges), root=str(tmp_path), undirected=True)
    undirected = resolve_partition(data, 2, create=True)
    assert undirected != directed
    assert json.loads((directed / "meta.json").read_text())["num_edges"] == 4
    assert json.loads((undirected / "meta.json").read_text())["num_edges"] == 8


def test_gnnpar_train_nproc_2(tmp_path: Path) -> None:
    exe = shutil.which("gnnpar-train")
    cmd = [exe] if exe else [sys.executable, "-m", "gnnpar.cli"]
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [*cmd, TINY, "--nproc", "2", "--epochs", "2", "--batch-size", "128", "--fanouts", "5,5",
         "--hidden", "16", "--eval-batch-size", "512", "--out", str(run_dir),
         "--root", str(tmp_path / "data"), "--no-progress"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "GNNPAR_TIMEOUT_S": "60"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for text in ("test accuracy:", "sampled", "full-neighbour", "epoch time:",
                 "sampled edges/s:", "communicated per epoch", "feature", "grad", "sample",
                 "2 parts (metis), 2 workers", str(run_dir / "record.json")):
        assert text in out, (text, out)
    record = json.loads((run_dir / "record.json").read_text())
    assert record["format"] == "gnnpar-run"
    assert record["args"]["train"]["epochs"] == 2 and record["env"]["world_size"] == 2
    assert [e["epoch"] for e in record["epochs"]] == [0, 1]
    for e in record["epochs"]:
        assert 0 <= e["test_acc"] <= 1 and e["epoch_time_s"] > 0
        assert e["sampled_edges_per_s"] > 0 and e["comm"]["feature"]["bytes"] > 0
    assert 0 <= record["summary"]["test_acc_full"] <= 1
    assert (run_dir / "checkpoint" / "state.json").is_file()
