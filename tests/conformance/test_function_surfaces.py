"""The public functions under the contract: the registry's function surfaces, each run.

``gnnpar.load_predictions`` against every edit of a predictions directory that once read
as a wrong table or raised a bare exception -- each with the index's digests rewritten
to match, so that only the checks behind them can catch it; ``load_partition`` and
``load_dataset`` against the hostile inputs; the writers against hostile outputs.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gnnpar.artifacts.registry import SURFACES
from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.spec import load_dataset
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import load_partition
from gnnpar.partition.writer import partition_graph
from gnnpar.plot import plot_records
from gnnpar.testing.conformance import (
    INPUT_CASES,
    MARKER_NAME,
    PREDICTION_EDITS,
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


@pytest.mark.parametrize("edit", list(PREDICTION_EDITS))
def test_load_predictions_refuses_every_edit(bench: Bench, tmp_path: Path, edit: str) -> None:
    d = tmp_path / "preds"
    shutil.copytree(bench.predictions(), d)
    assert load_predictions(d).num_nodes == 300  # the copy reads before the edit
    PREDICTION_EDITS[edit](d, bench.predictions(other=True))
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
        load_dataset(SPEC), out, PartitionConfig(num_parts=1), overwrite=ow, progress=False),
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
