"""The public functions under the contract: the registry's function surfaces, each run.

``gnnpar.load_predictions`` against every edit of a predictions directory that once read
as a wrong table or raised a bare exception -- each with the index's digests rewritten
to match, so that only the checks behind them can catch it; ``load_partition`` and
``load_dataset`` against the hostile inputs; the writers against hostile outputs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gnnpar.artifacts.files import json_digest, sha256_file
from gnnpar.artifacts.registry import SURFACES
from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.spec import load_dataset
from gnnpar.partition import load_partition, partition_graph
from gnnpar.plot import plot_records
from gnnpar.testing.conformance import (
    INPUT_CASES,
    MARKER_NAME,
    SPEC,
    Bench,
    call,
    snapshot,
)
from gnnpar.train.export import export
from gnnpar.train.predictions import load_predictions

FUNCTIONS = {"gnnpar.partition_graph", "gnnpar.load_partition", "gnnpar.GraphDataset.save",
             "gnnpar.load_dataset", "gnnpar.load_predictions", "gnnpar.train.export.export",
             "gnnpar.plot.plot_records", "gnnpar.Trainer"}
"""The function surfaces this file runs (gnnpar.Trainer: tests/train/test_run_dir.py)."""


def test_every_function_surface_is_run_here() -> None:
    assert {s.name for s in SURFACES if not s.command} == FUNCTIONS


def _index(d: Path) -> dict[str, Any]:
    return json.loads((d / "index.json").read_text())


def _write_index(d: Path, doc: dict[str, Any]) -> None:
    for shard in doc.get("shards", []) if isinstance(doc.get("shards"), list) else []:
        for name in shard.get("files", {}) if isinstance(shard, dict) else {}:
            f = d / shard["dir"] / name
            if f.is_file():
                shard["files"][name] = {"sha256": sha256_file(f), "bytes": f.stat().st_size}
    doc["digest"] = json_digest(doc)
    (d / "index.json").write_text(json.dumps(doc))


def _npy(d: Path, name: str, change: Callable[[np.ndarray], np.ndarray]) -> None:
    path = d / "rank-0" / f"{name}.npy"
    np.save(path, change(np.load(path)))


def _field(**fields: Any) -> Callable[[Path, Path], None]:
    def edit(d: Path, other: Path) -> None:
        doc = _index(d)
        for key, value in fields.items():
            if value is _DROP:
                doc.pop(key)
            elif "." in key:
                section, name, sub = key.split(".")
                doc[section][name][sub] = value
            else:
                doc[key] = value
        _write_index(d, doc)
    return edit


_DROP = object()


def _swap_shard(d: Path, other: Path) -> None:
    shutil.copyfile(other / "rank-0" / "logits.npy", d / "rank-0" / "logits.npy")
    _write_index(d, _index(d))


def _shift_ids(d: Path, other: Path) -> None:
    _npy(d, "node_ids", lambda a: a + 1)
    _write_index(d, _index(d))


def _not_argmax(d: Path, other: Path) -> None:
    _npy(d, "pred", lambda a: (a + 1) % 3)
    _write_index(d, _index(d))


def _nan_logits(d: Path, other: Path) -> None:
    _npy(d, "logits", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 5, np.nan, a))
    _write_index(d, _index(d))


def _float_ids(d: Path, other: Path) -> None:
    _npy(d, "node_ids", lambda a: a.astype(np.float64))
    _write_index(d, _index(d))


def _float16(d: Path, other: Path) -> None:
    _npy(d, "logits", lambda a: a.astype(np.float16))
    _field(**{"arrays.logits.dtype": "float16"})(d, other)


EDITS = {
    "a shard swapped from another run": _swap_shard,
    "node ids shifted by one": _shift_ids,
    "pred no longer the argmax of the logits": _not_argmax,
    "NaN logits": _nan_logits,
    "logits stored as float16": _float16,
    "float node_ids.npy": _float_ids,
    "num_nodes 10^13": _field(num_nodes=10**13),
    "width 10^9": _field(**{"arrays.logits.width": 10**9}),
    "dtype V2000000000": _field(**{"arrays.logits.dtype": "V2000000000"}),
    "dtype O": _field(**{"arrays.pred.dtype": "O"}),
    "negative num_nodes": _field(num_nodes=-5),
    "non-integer num_nodes": _field(num_nodes=299.5),
    "no arrays": _field(arrays=_DROP),
    "shards: 7": _field(shards=7),
    "task 7": _field(task=7),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_load_predictions_refuses_every_edit(bench: Bench, tmp_path: Path, edit: str) -> None:
    d = tmp_path / "preds"
    shutil.copytree(bench.predictions(), d)
    assert load_predictions(d).num_nodes == 300  # the copy reads before the edit
    EDITS[edit](d, bench.predictions(other=True))
    got = call(lambda: load_predictions(d))
    assert got.code == 1 and not got.crash, got.crash or got.out
    assert str(d) in got.err, got.err


@pytest.mark.parametrize(("rel", "case"), [
    (rel, case) for rel in ("index.json", "rank-0/logits.npy", "rank-0/node_ids.npy")
    for case in INPUT_CASES if not case.data_only or rel == "rank-0/logits.npy"],
    ids=lambda v: v if isinstance(v, str) else v.name)
def test_load_predictions_against_hostile_inputs(bench: Bench, tmp_path: Path, rel: str,
                                                 case: Any) -> None:
    d = tmp_path / "preds"
    shutil.copytree(bench.predictions(), d)
    case.damage(d, rel, bench.predictions(other=True))
    got = call(lambda: load_predictions(d))
    assert got.code == 1 and not got.crash, got.crash or got.out
    assert not (d / "rank-0" / MARKER_NAME).exists() and not (d / MARKER_NAME).exists()


def test_a_runs_stale_predictions_are_refused(bench: Bench, tmp_path: Path) -> None:
    """Predictions of an earlier checkpoint beside a newer one (a resume without them)."""
    run = tmp_path / "run"
    shutil.copytree(bench.run_dir(), run)
    assert load_predictions(run).num_nodes == 300
    shutil.rmtree(run / "predictions")
    shutil.copytree(bench.run_dir(other=True) / "predictions", run / "predictions")
    got = call(lambda: load_predictions(run))
    assert got.code == 1 and "stale" in got.err, got.err


@pytest.mark.parametrize(("kind", "rel", "case"), [
    (kind, rel, case) for kind, rel in (("partition", "part-0/feat.npy"),
                                        ("partition", "meta.json"), ("dataset", "x.npy"),
                                        ("dataset", "dataset.json"))
    for case in INPUT_CASES if not (case.data_only and rel.endswith(".json"))],
    ids=lambda v: v if isinstance(v, str) else v.name)
def test_loaders_against_hostile_inputs(bench: Bench, tmp_path: Path, kind: str, rel: str,
                                        case: Any) -> None:
    d = tmp_path / kind
    shutil.copytree(bench.artifact(kind), d)
    case.damage(d, rel, bench.artifact(kind, other=True))
    before = snapshot(d)
    got = call(lambda: load_partition(d, 0) if kind == "partition" else load_dataset(str(d)))
    assert got.code == 1 and not got.crash, got.crash or got.out
    assert not any(p.name == MARKER_NAME for p in tmp_path.rglob("*"))
    assert snapshot(d) == before


def _user_dir(out: Path) -> Path:
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    return out


WRITERS: dict[str, Callable[[Bench, Path, bool], Any]] = {
    "partition_graph": lambda b, out, ow: partition_graph(
        load_dataset(SPEC), 1, out, overwrite=ow, progress=False),
    "GraphDataset.save": lambda b, out, ow: GraphDataset.load(b.dataset()).save(
        out, overwrite=ow),
    "export": lambda b, out, ow: export(b.run_dir(), out / "model.pt" if out.is_dir()
                                       else out, ow),
    "plot_records": lambda b, out, ow: plot_records([b.run_dir()], out / "plot.png"
                                                    if out.is_dir() else out, overwrite=ow),
}


@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("where", ["user directory", "link to a user directory",
                                   "inside a run directory"])
def test_writers_against_hostile_outputs(bench: Bench, tmp_path: Path, writer: str,
                                         where: str) -> None:
    if where == "user directory":
        out = _user_dir(tmp_path / "mine")
        if writer in ("export", "plot_records"):  # a file of the user's, where it writes
            out = out / "thesis.tex"
    elif where == "link to a user directory":  # a file writer: a link to a user's file
        _user_dir(tmp_path / "mine")
        out = tmp_path / "link"
        out.symlink_to(tmp_path / "mine" / ("thesis.tex" if writer in ("export",
                                                                      "plot_records")
                                            else ""))
    else:
        shutil.copytree(bench.run_dir(), tmp_path / "run")
        out = tmp_path / "run" / "out"
    before = snapshot(tmp_path)
    for overwrite in (False, True):
        def write(ow: bool = overwrite) -> Any:
            return WRITERS[writer](bench, out, ow)
        got = call(write)
        assert got.code == 1 and not got.crash, got.crash or got.out
        assert snapshot(tmp_path) == before
