"""Inputs that crashed with a traceback (or an allocator's error) now end in one clear error.

Each case is a file or flag of the campaign: non-UTF-8 bytes in ``state.json``,
``meta.json`` and ``dataset.json``; a class label of 10^9, a node id of 10^12, an absurd
``--hidden`` (checked against what the input implies before anything is allocated); a
non-integer ``num_nodes`` in ``dataset.json``; a ``--root`` that cannot be written; a
full disk while checkpointing or writing the run record (no temporary file left, the
directory and the bytes named); a pickle in a ``.pt`` split file (refused without torch's
advice to load it unsafely); an empty edge list; identical validation and test edges (a
warning); and pipeline stages that count different kinds of exchange.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import pickle
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import gnnpar.artifacts.files
import gnnpar.train.checkpoint as checkpoint
from gnnpar.artifacts.files import json_digest
from gnnpar.comm import CommStats, comm_totals
from gnnpar.datasets.__main__ import main as datasets_main
from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.ogb import _torch_split_file
from gnnpar.datasets.synthetic import sbm
from gnnpar.distributed import DistContext, init
from gnnpar.errors import DatasetError, StorageError
from gnnpar.partition.cli import main as partition_main
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.sizes import physical_memory
from gnnpar.testing import run_multiproc
from gnnpar.train.checkpoint import save_checkpoint
from gnnpar.train.cli import main as train_main
from gnnpar.train.record import RunRecord

CTX = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"),
                  backend="gloo")


def _one_error(main: Callable[[Sequence[str]], int], argv: list[str],
               capsys: pytest.CaptureFixture[str], *parts: str) -> str:
    """Run a command's ``main``; assert it fails with one error line holding ``parts``."""
    capsys.readouterr()
    assert main(argv) != 0
    text = capsys.readouterr().err
    err = [ln for ln in text.splitlines() if "error:" in ln]
    assert len(err) == 1 and "Traceback" not in text and "Fix:" in err[0], text
    assert all(p in err[0] for p in parts), err
    return err[0]


@pytest.fixture(scope="module")
def graph_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("inputs")
    ds = sbm(num_nodes=200, avg_degree=4, num_classes=3, feat_dim=4, seed=0)
    pairs = zip(np.asarray(ds.src).tolist(), np.asarray(ds.dst).tolist(), strict=True)
    (d / "edges.csv").write_text("src,dst\n" + "".join(f"{s},{t}\n" for s, t in pairs))
    np.save(d / "x.npy", np.asarray(ds.x))
    (d / "y.csv").write_text("".join(f"{v}\n" for v in np.asarray(ds.y)))
    ds.save(d / "saved")
    partition_graph(ds, d / "parts", PartitionConfig(num_parts=1))
    return {"edges": d / "edges.csv", "x": d / "x.npy", "y": d / "y.csv",
            "saved": d / "saved", "parts": d / "parts", "dir": d}


def _garble(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:10] + b"\xff\xfe" + data[12:])


def test_non_utf8_json_is_one_error_naming_the_file(
        graph_files: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    parts = Path(shutil.copytree(graph_files["parts"], tmp_path / "parts"))
    _garble(parts / "meta.json")
    _one_error(partition_main, ["info", str(parts)], capsys, str(parts / "meta.json"),
               "not UTF-8 text (byte 0xff at offset 10)")
    saved = Path(shutil.copytree(graph_files["saved"], tmp_path / "saved"))
    _garble(saved / "dataset.json")
    _one_error(datasets_main, [str(saved)], capsys, str(saved / "dataset.json"), "not UTF-8")
    ckpt = tmp_path / "ckpt"
    save_checkpoint(ckpt, CTX, torch.nn.Linear(2, 2), extra={"epoch": 1})
    _garble(ckpt / "state.json")
    with pytest.raises(Exception, match="not UTF-8") as exc:
        checkpoint.read_state(ckpt)
    assert getattr(exc.value, "path", None) == str(ckpt / "state.json")


def test_integers_that_size_arrays_are_checked_before_allocating(
        graph_files: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    f = graph_files
    labels = tmp_path / "y-big.csv"
    labels.write_text("1000000000\n" + f["y"].read_text().split("\n", 1)[1])
    _one_error(datasets_main, [str(f["edges"]), "--features", str(f["x"]), "--labels",
                               str(labels), "--split", "0.6,0.2,0.2"], capsys,
               str(labels), "label 1,000,000,000", "more classes than the 200 nodes")
    edges = tmp_path / "edges-big.csv"
    edges.write_text(f["edges"].read_text() + "5,1000000000000\n")
    _one_error(datasets_main, [str(edges)], capsys, str(edges), "num_nodes",
               "1,000,000,000,001 nodes", f"{physical_memory() / 1e9:.1f} GB")
    run = tmp_path / "run"
    _one_error(train_main, [str(f["parts"]), "--hidden", "10000000", "--layers", "3",
                            "--fanouts", "5,5,5", "--nproc", "1", "--out", str(run)], capsys,
               "model.hidden", "--hidden 10000000 with 3 layers")
    assert not run.exists()  # refused before the run directory
    saved = tmp_path / "saved"
    shutil.copytree(f["saved"], saved)
    meta = json.loads((saved / "dataset.json").read_text())
    meta["num_nodes"] = "200 nodes"  # its digest rewritten: the count check must catch it
    (saved / "dataset.json").write_text(json.dumps({**meta, "digest": json_digest(meta)}))
    _one_error(datasets_main, [str(saved)], capsys, str(saved / "dataset.json"),
               "num_nodes", "expected a count")


def test_a_root_that_cannot_be_written_is_named(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    _one_error(train_main, ["synthetic:sbm?nodes=300", "--root", str(blocker / "data"),
                            "--nproc", "1", "--out", str(tmp_path / "run")], capsys,
               "data.root", "cannot be created", "--root")


def test_a_full_disk_while_checkpointing_leaves_nothing_half_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = torch.nn.Linear(64, 64)
    ckpt = tmp_path / "checkpoint"
    save_checkpoint(ckpt, CTX, model, extra={"epoch": 1})
    before = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    real = checkpoint._write_tensors

    def filling(path: Path, tensors: dict[str, torch.Tensor]) -> Any:
        real(path, tensors)  # the file is written, then the disk is found full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "_write_tensors", filling)
    with pytest.raises(StorageError, match="No space left on device") as exc:
        save_checkpoint(ckpt, CTX, model, extra={"epoch": 2})
    need = 64 * 64 * 4 + 64 * 4
    assert exc.value.path == str(tmp_path) and "free space" in (exc.value.fix or "")
    assert "the checkpoint cannot be written" in exc.value.message
    assert int(exc.value.message.split("needs ")[1].split(" bytes")[0].replace(",", "")) > need
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]  # no .tmp left
    assert {p.name: p.read_bytes() for p in ckpt.iterdir()} == before

    record = RunRecord(config={}, status="running")
    record.write(tmp_path / "record.json")
    good = (tmp_path / "record.json").read_bytes()

    class Full(io.BytesIO):
        def __init__(self, path: str, mode: str) -> None:
            super().__init__()
            Path(path).write_bytes(b"{half")  # what a full disk leaves

        def __enter__(self) -> Full:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gnnpar.artifacts.files, "open", Full, raising=False)
    record.status = "complete"
    with pytest.raises(StorageError, match="record.json cannot be written"):
        record.write(tmp_path / "record.json")
    assert (tmp_path / "record.json").read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "record.json"]


class _Payload:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("echo pwned",))


def test_a_pickle_in_a_pt_split_file_is_refused_without_torchs_advice(tmp_path: Path) -> None:
    bad = tmp_path / "train.pt"
    torch.save({"edge": _Payload()}, bad)
    plain = tmp_path / "plain.pt"
    plain.write_bytes(pickle.dumps({"edge": _Payload()}))
    for path in (bad, plain):
        with pytest.raises(DatasetError) as exc:
            _torch_split_file(path)
        text = str(exc.value)
        assert exc.value.path == str(path) and "weights_only" not in text, text
        assert "likely succeed" not in text and "re-download" in text


def test_an_empty_edge_list_is_refused(graph_files: dict[str, Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("src,dst\n")
    _one_error(datasets_main, [str(empty), "--features", str(graph_files["x"])], capsys,
               str(empty), "holds no edges", "200 nodes")


def test_identical_validation_and_test_edges_are_warned(
        caplog: pytest.LogCaptureFixture) -> None:
    ds = sbm(num_nodes=300, avg_degree=6, num_classes=3, feat_dim=4, seed=0,
             task="link")
    with caplog.at_level(logging.WARNING, logger="gnnpar.datasets"):
        ds.validate()
    assert not caplog.records
    same = GraphDataset(**{**ds.__dict__, "test_edges": ds.val_edges.copy(),
                           "test_neg": ds.val_neg.copy()})
    with caplog.at_level(logging.WARNING, logger="gnnpar.datasets"):
        same.validate()
    assert len(caplog.records) == 1
    assert "validation and test supervision edges are the same" in caplog.records[0].message


def counting(kinds: dict[int, dict[str, tuple[int, int]]]) -> dict[str, dict[str, int]]:
    """Count this rank's ``kinds`` ({kind: (rows, bytes)}) and total them (collective)."""
    ctx = init()
    stats = CommStats()
    for kind, (rows, nbytes) in kinds[ctx.rank].items():
        stats.record(kind, rows, rows, nbytes, nbytes)
    return comm_totals(stats, ctx)


def test_comm_totals_sum_over_the_union_of_kinds() -> None:
    # Pipeline stages: the first sends, the last receives; both all-reduce.
    kinds = {0: {"send": (3, 300), "all_reduce": (1, 10)},
             1: {"recv": (5, 500), "all_reduce": (2, 20)}}
    want = {"all_reduce": {"rows": 3, "bytes": 30}, "recv": {"rows": 5, "bytes": 500},
            "send": {"rows": 3, "bytes": 300}}
    assert run_multiproc(counting, 2, kinds) == [want, want]
