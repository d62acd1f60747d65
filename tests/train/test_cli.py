"""``gnnpar-train``: one config (flags > file > defaults), checks before any work, run dirs."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

import gnnpar.train.launch as launch_module
from gnnpar.config import field_docs, from_dict, sections
from gnnpar.datasets.config import DataConfig
from gnnpar.distributed import check_device
from gnnpar.errors import ConfigError
from gnnpar.testing.conformance import lock_held
from gnnpar.train.checkpoint import save_checkpoint
from gnnpar.train.cli import build_parser, main, parse
from gnnpar.train.config import Config, ModelConfig
from gnnpar.train.prepare import (
    check_world_size,
    partition_cache_dir,
    partition_command,
    partition_settings,
    resolve_partition,
)
from gnnpar.train.rundir import check_resume, prepare_run_dir

TINY = "synthetic:sbm?nodes=1500&feat_dim=16&classes=4&seed=2"


def test_defaults_and_flags() -> None:
    assert parse([]) == Config()
    cfg = parse(["parts/x", "--model", "gat", "--fanouts", "15,10,5", "--layers", "3",
                 "--batch-size", "256", "--epochs", "3", "--lr", "0.1", "--hidden", "64",
                 "--dropout", "0.2", "--out", "r", "--seed", "7", "--no-prefetch",
                 "--num-parts", "4", "--checkpoint-steps", "5", "--partition-seed", "3",
                 "--split", "0.5,0.25,0.25", "--timeout-s", "30"])
    assert cfg.data.dataset == "parts/x" and cfg.data.split == "0.5,0.25,0.25"
    assert cfg.partition.num_parts == 4 and cfg.partition.seed == 3
    assert (cfg.model.name, cfg.model.layers, cfg.model.hidden, cfg.model.dropout) == \
        ("gat", 3, 64, 0.2)
    assert cfg.sample.fanouts == (15, 10, 5) and cfg.sample.batch_size == 256
    assert not cfg.sample.prefetch and (cfg.train.epochs, cfg.train.lr) == (3, 0.1)
    assert (cfg.run.out, cfg.run.checkpoint_steps, cfg.run.timeout_s) == ("r", 5, 30.0)
    assert (cfg.train.eval, cfg.train.eval_budget_mb) == ("auto", 64.0)
    cfg = parse(["--eval", "sampled", "--eval-budget-mb", "0.5"])
    assert (cfg.train.eval, cfg.train.eval_budget_mb) == ("sampled", 0.5)
    assert parse(["--mode", "full", "--eval", "none"]).train.eval == "none"


def test_every_field_has_a_docstring_shown_in_help() -> None:
    text = build_parser().format_help()
    for name, section in {"config": Config, **sections(Config)}.items():
        docs = field_docs(section)
        assert set(docs) == set(section.__dataclass_fields__), name
    for phrase in ("Seed nodes per step on each rank", "--fanouts", "--mode", "--boundary-p",
                   "--split", "--overwrite", "--timeout-s", "--config"):
        assert phrase in text, phrase


def test_defaults_per_task_in_help_and_resolved_by_the_task() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "(default: 0.5 with --task node, 0.0 with --task link)" in text  # --dropout
    assert "(default: 1024 with --task node, 256 with --task link)" in text  # --batch-size
    assert parse([]).model.dropout == 0.5 and parse([]).sample.batch_size == 1024
    link = parse(["--task", "link"])
    assert link.model.dropout == 0.0 and type(link.model.dropout) is float
    assert link.sample.batch_size == 256 and type(link.sample.batch_size) is int
    assert link.to_dict()["model"]["dropout"] == 0.0  # what OUT/config.json repeats
    assert parse(["--task", "link", "--dropout", "0.5"]).model.dropout == 0.5  # given: kept
    # In Python: a section on its own holds the node value; validate() (the Trainer's)
    # puts the task's in place, and leaves a value given in Python as it is.
    cfg = Config(data=DataConfig(task="link"))
    assert cfg.model.dropout == 0.5 and cfg.validate().model.dropout == 0.0
    given = replace(cfg, model=ModelConfig(dropout=0.5))
    assert given.validate().model.dropout == 0.5


@pytest.mark.parametrize("argv,field,flag", [
    (["--batch-size", "0"], "sample.batch_size", "--batch-size"),
    (["--fanouts", "10,0"], "sample.fanouts", "--fanouts"),
    (["--fanouts", "10"], "sample.fanouts", "--fanouts"),
    (["--epochs", "-1"], "train.epochs", "--epochs"),
    (["--model", "gin"], "model.name", "--model"),
    (["--model", "gat", "--hidden", "30", "--heads", "4"], "model.hidden", "--hidden"),
    (["--dropout", "1.0"], "model.dropout", "--dropout"),
    (["--lr", "0"], "train.lr", "--lr"),
    (["--lr", "inf"], "train.lr", "--lr"),
    (["--mode", "both"], "train.mode", "--mode"),
    (["--partitioner", "kl"], "partition.partitioner", "--partitioner"),
    (["--mode", "full", "--boundary-p", "1.5"], "full.boundary_p", "--boundary-p"),
    (["--resume"], "run.out", "--out"),
    (["--out", "r", "--resume", "--overwrite"], "run.resume", "--resume"),
    (["--split", "0.9,0.9,0.1"], "data.split", "--split"),
    (["--eval", "exact"], "train.eval", "--eval"),
    (["--mode", "full", "--eval", "sampled"], "train.eval", "--eval"),
    (["--eval-budget-mb", "0"], "train.eval_budget_mb", "--eval-budget-mb"),
])
def test_validation_names_field_and_flag(argv: list[str], field: str, flag: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(argv)
    assert info.value.field == field
    assert flag in str(info.value)


def test_flags_of_the_other_mode_are_refused() -> None:
    with pytest.raises(ConfigError, match="--fanouts.*--mode sample") as info:
        parse(["--mode", "full", "--fanouts", "5,5"])
    assert info.value.field == "sample.fanouts"
    with pytest.raises(ConfigError, match="--stale"):
        parse(["--stale"])
    assert parse(["--mode", "full", "--stale"]).full.stale


def test_config_file_round_trip_and_precedence(tmp_path: Path) -> None:
    cfg = parse(["--mode", "full", "--model", "gcn", "--epochs", "7", "--boundary-p", "0.5",
                 "--balance", "nodes,edges", "--out", "runs/x"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg.to_dict()))
    assert parse(["--config", str(path)]) == cfg
    assert from_dict(Config, json.loads(path.read_text())) == cfg
    assert parse(["--config", str(path), "--epochs", "9"]).train.epochs == 9  # flags win
    toml = tmp_path / "config.toml"
    toml.write_text('[train]\nmode = "full"\nepochs = 7\n[model]\nname = "gcn"\n'
                    '[full]\nboundary_p = 0.5\n[partition]\nbalance = ["nodes", "edges"]\n'
                    '[run]\nout = "runs/x"\n')
    assert parse(["--config", str(toml)]) == cfg
    toml.write_text("[sample]\nfanout = [5]\n")
    with pytest.raises(ConfigError, match="unknown field") as info:
        parse(["--config", str(toml)])
    assert info.value.field == "sample.fanout" and str(toml) in str(info.value)
    toml.write_text('[sample]\nbatch_size = "big"\n')
    with pytest.raises(ConfigError, match="expected int"):
        parse(["--config", str(toml)])


def test_bad_flag_exits_before_launch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--batch-size", "0", "--nproc", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gnnpar-train: error: sample.batch_size: got 0")
    assert main(["--num-parts", "3", "--nproc", "2", "--root", "unused"]) == 1
    assert "--num-parts 3 with 2 processes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--fanouts", "ten"])


@pytest.fixture
def no_spawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record (instead of run) every attempt to start workers."""
    calls: list[Any] = []
    monkeypatch.setattr(launch_module, "launch_workers", lambda *a, **k: calls.append(a))
    return calls


def test_world_size_check_fails_without_spawning(tmp_path: Path, no_spawn: list[Any],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    parts = resolve_partition(parse([TINY, "--root", str(tmp_path)]), 2)
    out = tmp_path / "run"
    assert main([str(parts), "--nproc", "4", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "2 parts but 4 processes" in err and "--nproc 2" in err
    assert no_spawn == [] and not out.exists()


def test_partition_flags_contradicting_a_partition_dir_are_refused(
        tmp_path: Path, no_spawn: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    parts = resolve_partition(parse([TINY, "--root", str(tmp_path)]), 2)
    out = tmp_path / "run"
    for flags, said in ((["--feature-dtype", "bf16"], "--feature-dtype bf16, but the "
                         "partition directory was made with fp32"),
                        (["--partitioner", "random"], "--partitioner random"),
                        (["--halo-hops", "2"], "--halo-hops 2")):
        assert main([str(parts), "--nproc", "2", "--out", str(out), *flags]) == 1
        err = capsys.readouterr().err
        assert said in err and "gnnpar-partition DATASET --num-parts 2" in err, err
    assert no_spawn == [] and not out.exists()
    # The settings it was made with are no contradiction.
    check_world_size(parse([str(parts), "--partitioner", "metis", "--halo-hops", "1"]), 2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_cuda_on_a_machine_without_gpu_is_one_line_before_any_worker(tmp_path: Path) -> None:
    exe = shutil.which("gnnpar-train")
    out = tmp_path / "run"
    proc = subprocess.run([*([exe] if exe else [sys.executable, "-m", "gnnpar.train"]),
                           "--nproc", "2", "--device", "cuda", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr  # one line, no worker's log or traceback
    assert proc.stderr.startswith("gnnpar-train: error: run.device: --device cuda, but torch ")
    assert "sees no GPU here. Fix: pass --device cpu" in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("device", ["cuda", None, "cuda:0"])
def test_more_processes_than_gpus_is_one_line_before_any_worker(
        monkeypatch: pytest.MonkeyPatch, no_spawn: list[Any], capsys: pytest.CaptureFixture[str],
        tmp_path: Path, device: str | None) -> None:
    # The launcher reads the GPU count from torch in its own process, before any worker
    # exists: here torch reports one GPU there (this machine has none).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    out = tmp_path / "run"
    flags = [] if device is None else ["--device", device]
    assert main(["--nproc", "2", *flags, "--out", str(out), "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gnnpar-train: error: "), err
    if device == "cuda:0":
        assert "device cuda:0 names one GPU, but 2 processes run on this machine" in err
    else:
        assert ("run.nproc: 2 processes on this machine but 1 GPU; NCCL needs one GPU per "
                "process. Fix: pass --nproc 1 or fewer") in err and "or --device cpu." in err
    assert no_spawn == [] and not out.exists()
    assert not (tmp_path / "partitions").exists()  # refused before any data was read
    check_device("cuda", 1)  # as many processes as GPUs: no error
    check_device("cpu", 8)


def test_run_directory_is_never_overwritten_silently(tmp_path: Path, no_spawn: list[Any],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "record.json").write_text('{"format": "gnnpar-run", "format_version": 2, '
                                     '"status": "complete", "epochs": [{}, {}]}')
    assert main([TINY, "--nproc", "2", "--out", str(run), "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "already holds a run (2 epochs, status complete)" in err
    assert "--resume" in err and "--overwrite" in err
    assert (run / "record.json").is_file() and no_spawn == []
    assert not (tmp_path / "partitions").exists()  # refused before any data was read
    # --overwrite moves the run's own files aside until the new run checkpoints.
    assert prepare_run_dir(str(run), name="x", overwrite=True) == run
    assert [p.name for p in run.iterdir()] == [".previous-run"]
    # A directory holding other files is never written into, not even with --overwrite.
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="not a gnnpar run"):
        prepare_run_dir(str(other), name="x", overwrite=True)
    assert (other / "notes.txt").read_text() == "keep me"
    # Without --out, each run gets a new directory.
    first = prepare_run_dir(None, name=str(tmp_path / "auto"))
    assert not first.exists()  # made by the run when it writes (a refused run leaves none)
    first.mkdir()
    (first / "record.json").write_text("{}")
    assert prepare_run_dir(None, name=str(tmp_path / "auto")) == tmp_path / "auto-2"


def test_resume_refuses_other_settings(tmp_path: Path) -> None:
    from gnnpar.distributed import DistContext

    ctx = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"),
                      backend="gloo")
    out = tmp_path / "run"
    cfg = parse(["--out", str(out), "--epochs", "4"])
    model = torch.nn.Linear(2, 2)
    save_checkpoint(out / "checkpoint", ctx, model, extra={
        "config": cfg.to_dict(), "epochs": [{"epoch": 0}, {"epoch": 1}], "partial": [],
        "position": {"epoch": 2, "step": 0}})
    check_resume(out, parse(["--out", str(out), "--resume", "--epochs", "6", "--no-progress"]))
    # What the run ends with changes no training step.
    check_resume(out, parse(["--out", str(out), "--resume", "--eval", "none",
                             "--eval-budget-mb", "1"]))
    with pytest.raises(ConfigError) as info:
        check_resume(out, parse(["--out", str(out), "--resume", "--lr", "0.01",
                                 "--fanouts", "5,5"]))
    text = str(info.value)
    assert "--lr 0.005 -> 0.01" in text and "--fanouts [10, 10] -> [5, 5]" in text
    assert "config.json" in text
    with pytest.raises(ConfigError, match="finished 2 epochs") as info:
        check_resume(out, parse(["--out", str(out), "--resume", "--epochs", "2"]))
    assert info.value.field == "train.epochs"
    with pytest.raises(ConfigError, match="no checkpoint"):
        check_resume(tmp_path / "empty", cfg)


def test_a_run_waits_for_another_process_partitioning_the_same_spec(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = parse([TINY, "--root", str(tmp_path)])
    out = partition_cache_dir(cfg, 2)
    out.parent.mkdir(parents=True)
    with lock_held(out) as pid:  # another gnnpar process writing that cache, then dying
        threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()
        with caplog.at_level(logging.INFO, logger="gnnpar"):
            assert resolve_partition(cfg, 2) == out
    assert f"waiting for process {pid}" in caplog.text  # it waited, then partitioned
    assert (out / "meta.json").is_file() and "partitioned in" in caplog.text


def test_concurrent_runs_on_one_spec_partition_it_once(tmp_path: Path) -> None:
    code = ("import json, sys; from gnnpar.train.cli import parse\n"
            "from gnnpar.train.prepare import resolve_partition\n"
            "phases = {}\n"
            "out = resolve_partition(parse([sys.argv[1], '--root', sys.argv[2]]), 2, "
            "phases=phases)\n"
            "print(json.dumps([str(out), sorted(phases)]))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, TINY, str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    said = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [e[-2000:] for _, e in said]
    runs = [json.loads(o) for o, _ in said]
    want = str(partition_cache_dir(parse([TINY, "--root", str(tmp_path)]), 2))
    assert {r[0] for r in runs} == {want}
    assert sorted(r[1] for r in runs) == [[], [], ["load", "partition"]]  # made once


def test_partition_cache_follows_settings_and_inputs(tmp_path: Path) -> None:
    cfg = parse([TINY, "--root", str(tmp_path)])
    out = resolve_partition(cfg, 2)
    assert out == partition_cache_dir(cfg, 2) and (out / "meta.json").is_file()
    stamp = (out / "meta.json").stat().st_mtime_ns
    assert resolve_partition(cfg, 2) == out
    assert (out / "meta.json").stat().st_mtime_ns == stamp  # reused, not rewritten
    assert partition_cache_dir(cfg, 4) != out
    assert partition_cache_dir(parse([TINY, "--root", str(tmp_path), "--partition-seed", "1"]),
                               2) != out
    assert resolve_partition(parse([str(out)]), 2) == out  # a partition dir as it is
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 3\n3 0\n")
    directed = partition_cache_dir(parse([str(edges), "--root", str(tmp_path)]), 2)
    undirected = partition_cache_dir(parse([str(edges), "--root", str(tmp_path),
                                            "--undirected"]), 2)
    assert undirected != directed
    os.utime(edges, ns=(1, 1))  # an edited input is partitioned anew
    assert partition_cache_dir(parse([str(edges), "--root", str(tmp_path)]), 2) != directed



def test_full_mode_balances_stored_edges_by_default(tmp_path: Path) -> None:
    root = ["--root", str(tmp_path)]
    full = resolve_partition(parse([TINY, *root, "--mode", "full"]), 2)
    meta = json.loads((full / "meta.json").read_text())
    assert meta["partitioner"]["balance"] == ["nodes", "train", "edges"]
    assert "--balance nodes,train,edges" in partition_command(
        parse([TINY, *root, "--mode", "full"]), 2, full)
    sample = resolve_partition(parse([TINY, *root]), 2)
    assert sample != full
    made = json.loads((sample / "meta.json").read_text())["partitioner"]
    assert made["balance"] == ["nodes", "train", "work"]
    assert made["work_fanouts"] == [10, 10] and made["work_batch_size"] == 1024
    assert partition_settings(parse([TINY, "--mode", "full", "--balance", "nodes"])
                              ).balance == ("nodes",)  # a --balance given wins
    check_world_size(parse([str(sample), "--mode", "full"]), 2)  # a directory as it is

def test_the_work_balance_is_for_the_runs_own_sampling(tmp_path: Path) -> None:
    run = parse([TINY, "--fanouts", "15,10", "--batch-size", "512"])
    assert (partition_settings(run).work_fanouts, partition_settings(run).work_batch_size
            ) == ((15, 10), 512)
    given = parse([TINY, "--fanouts", "15,10", "--work-fanouts", "5,5"])
    assert partition_settings(given).work_fanouts == (5, 5)  # a setting given wins
    unused = parse([TINY, "--fanouts", "15,10", "--balance", "nodes,train"])
    assert partition_settings(unused).work_fanouts is None  # no work column to weigh
    assert partition_cache_dir(unused, 2) == partition_cache_dir(
        parse([TINY, "--balance", "nodes,train"]), 2)
    assert partition_cache_dir(run, 2) != partition_cache_dir(parse([TINY]), 2)
    assert "--work-fanouts 15,10 --work-batch-size 512" in partition_command(run, 2, tmp_path)
    for bad in ("0,10", "10,-2"):
        with pytest.raises(ConfigError, match="--work-fanouts"):
            parse([TINY, "--work-fanouts", bad]).validate()


def test_help_imports_no_torch() -> None:
    code = ("import sys; from gnnpar.train.cli import build_parser; "
            "build_parser().format_help(); print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr
