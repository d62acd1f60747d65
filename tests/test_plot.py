"""Tests of ``gnnpar.plot``: the pictures are checked by their pixels, not by eye."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import matplotlib.image
import numpy as np
import pytest

from gnnpar.datasets.synthetic import sbm
from gnnpar.errors import ConfigError, PartitionError
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import EDGE_DTYPES
from gnnpar.partition.writer import partition_graph
from gnnpar.plot import (
    DPI,
    PARTITION_FIGSIZE,
    RECORD_FILE,
    RECORDS_FIGSIZE,
    RUN_COLORS,
    main,
    plot_partition,
    plot_records,
    read_run,
)

# --- helpers -------------------------------------------------------------------------


def _epoch(e: int, evaluated: bool, kinds: dict[str, int]) -> dict[str, Any]:
    return {
        "epoch": e, "train_loss": 1.5 / (e + 1), "train_acc": 0.5 + 0.05 * e,
        "val_acc": 0.45 + 0.05 * e if evaluated else None,
        "test_acc": 0.44 + 0.05 * e if evaluated else None,
        "epoch_time_s": 0.8 + 0.01 * e, "eval_time_s": 0.1 if evaluated else None,
        "sampled_edges": 1000 + e, "sampled_edges_per_s": 1.5e6,
        "comm": {k: {"rows": b // 400, "bytes": b * (e + 1)} for k, b in kinds.items()},
        "eval_comm": {"feature": {"rows": 10, "bytes": 4_000_000}} if evaluated else {},
    }


def _record(num_epochs: int, status: str = "complete", eval_every: int = 1,
            kinds: dict[str, int] | None = None) -> dict[str, Any]:
    kinds = {"feature": 3_000_000, "grad": 1_000_000} if kinds is None else kinds
    epochs = [_epoch(e, (e + 1) % eval_every == 0, kinds) for e in range(num_epochs)]
    return {
        "format": "gnnpar-run", "format_version": 2, "status": status,
        "config": {"train": {"epochs": num_epochs}},
        "partition": {"dir": "p", "name": "sbm", "num_parts": 2, "num_nodes": 300,
                      "num_edges": 1500},
        "env": {"world_size": 2, "device": "cpu"},
        "epochs": epochs,
        "summary": {} if status == "running" else {"mode": "sample", "epochs": num_epochs,
                                                   "test_acc": 0.7},
    }


def _write(run_dir: Path, record: dict[str, Any]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RECORD_FILE
    path.write_text(json.dumps(record))
    return path


def _two_runs(tmp_path: Path) -> list[Path]:
    """A finished 5-epoch run and a running 3-epoch one that evaluates every 2nd epoch."""
    return [_write(tmp_path / "run-a", _record(5)),
            _write(tmp_path / "run-b", _record(3, status="running", eval_every=2,
                                               kinds={"feature": 5_000_000, "halo": 2_000_000}))]


def _pixels(path: Path) -> np.ndarray:
    """RGB uint8 pixels of a PNG."""
    img = matplotlib.image.imread(path)
    return np.asarray(np.round(img[..., :3] * 255), dtype=np.int64)


def _count(pixels: np.ndarray, hex_color: str, tol: int = 10) -> int:
    """Pixels within ``tol`` of ``hex_color`` in every channel."""
    rgb = np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(pixels - rgb).max(axis=-1) <= tol).sum())


def _assert_not_blank(pixels: np.ndarray) -> None:
    non_white = (pixels < 250).any(axis=-1).mean()
    assert non_white > 0.03, f"only {non_white:.1%} of the pixels are not white"
    colours = len(np.unique(pixels.reshape(-1, 3), axis=0))
    assert colours > 20, f"only {colours} distinct colours"


def _size(figsize: tuple[float, float]) -> tuple[int, int]:
    return round(figsize[1] * DPI), round(figsize[0] * DPI)


@pytest.fixture
def partition_dir(tmp_path: Path) -> Path:
    out = tmp_path / "part"
    partition_graph(sbm(num_nodes=300, avg_degree=5, num_classes=3, feat_dim=4, seed=0), out,
                    PartitionConfig(num_parts=2))
    return out


# --- records -------------------------------------------------------------------------


def test_records_picture_size_content_and_run_colours(tmp_path: Path) -> None:
    out = tmp_path / "pics" / "nested" / "runs.png"  # the directory does not exist yet
    written = plot_records(_two_runs(tmp_path), out, labels=["cache", "no cache"])
    assert written == out and out.is_file()
    pixels = _pixels(out)
    assert pixels.shape[:2] == _size(RECORDS_FIGSIZE) == (800, 1200)
    _assert_not_blank(pixels)
    assert _count(pixels, RUN_COLORS[0]) > 500
    assert _count(pixels, RUN_COLORS[1]) > 500
    assert not list(out.parent.glob(".*tmp*")), "a temporary file was left behind"


def test_one_run_draws_only_its_colour(tmp_path: Path) -> None:
    # The negative control of the test above: the second run's colour comes from the run.
    out = plot_records([_write(tmp_path / "a", _record(4))], tmp_path / "one.png")
    pixels = _pixels(out)
    assert _count(pixels, RUN_COLORS[0]) > 500
    assert _count(pixels, RUN_COLORS[1]) < 20


def test_read_run_series(tmp_path: Path) -> None:
    _, b = _two_runs(tmp_path)
    run = read_run(b.parent)  # a run directory works too
    assert run.label == "run-b" and run.path == b and run.status == "running"
    assert run.epochs == [0, 1, 2]
    assert run.metrics["val_acc"] == [None, pytest.approx(0.5), None]
    assert run.metrics["train_loss"] == pytest.approx([1.5, 0.75, 0.5])
    assert sorted(run.comm) == ["feature", "halo"]
    assert run.comm["feature"] == pytest.approx([5.0, 10.0, 15.0])  # MB
    assert run.eval_comm == {"feature": [None, pytest.approx(4.0), None]}
    assert read_run(b, label="mine").label == "mine"


def test_comm_kind_missing_in_an_epoch_is_zero(tmp_path: Path) -> None:
    rec = _record(2)
    del rec["epochs"][1]["comm"]["grad"]
    run = read_run(_write(tmp_path / "r", rec))
    assert run.comm["grad"] == pytest.approx([1.0, 0.0])


def test_run_without_epochs_still_draws(tmp_path: Path) -> None:
    rec = _record(0, status="running")
    out = plot_records([_write(tmp_path / "new", rec)], tmp_path / "empty.png")
    pixels = _pixels(out)
    assert pixels.shape[:2] == _size(RECORDS_FIGSIZE)
    assert (pixels < 250).any(axis=-1).mean() > 0.005  # axes, titles and the legend


def test_only_a_picture_gnnpar_drew_is_replaced_and_only_with_overwrite(
        tmp_path: Path) -> None:
    run = _write(tmp_path / "a", _record(2))
    out = tmp_path / "p.png"
    out.write_bytes(b"\x89PNG\r\n\x1a\nsomeone's picture")
    for overwrite in (False, True):  # a user's file: never, not even with --overwrite
        with pytest.raises(ConfigError, match="not written by gnnpar as a picture"):
            plot_records([run], out, overwrite=overwrite)
    assert out.read_bytes() == b"\x89PNG\r\n\x1a\nsomeone's picture"
    mine = tmp_path / "q.png"
    plot_records([run], mine)
    first = mine.read_bytes()
    assert first[:8] == b"\x89PNG\r\n\x1a\n" and b"gnnpar-plot" in first  # the marker
    with pytest.raises(ConfigError, match="already exists"):
        plot_records([run], mine)
    assert mine.read_bytes() == first
    plot_records([run], mine, labels=["again"], overwrite=True)
    assert mine.read_bytes() != first


@pytest.mark.parametrize(("change", "field"), [
    ({"format": "gnnpar-checkpoint"}, "format"),
    ({"format_version": 1}, "format_version"),
    ({"epochs": {"0": {}}}, "epochs"),
])
def test_bad_record_names_file_and_field(tmp_path: Path, change: dict[str, Any],
                                         field: str) -> None:
    path = _write(tmp_path / "bad", {**_record(2), **change})
    with pytest.raises(ConfigError) as info:
        plot_records([path], tmp_path / "x.png")
    assert info.value.field == field and info.value.path == str(path)
    assert not (tmp_path / "x.png").exists()


def test_bad_epoch_value_names_the_epoch(tmp_path: Path) -> None:
    rec = _record(3)
    rec["epochs"][2]["train_loss"] = "1.0"
    with pytest.raises(ConfigError, match=r"epochs\[2\]\.train_loss"):
        read_run(_write(tmp_path / "r", rec))


def test_missing_record_and_label_count(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file is missing"):
        plot_records([tmp_path / "nowhere"], tmp_path / "x.png")
    a = _write(tmp_path / "a", _record(2))
    with pytest.raises(ConfigError, match="2 labels for 1 records"):
        plot_records([a], tmp_path / "x.png", labels=["x", "y"])
    with pytest.raises(ConfigError, match="no run records"):
        plot_records([], tmp_path / "x.png")


def test_output_path_errors(tmp_path: Path) -> None:
    a = _write(tmp_path / "a", _record(2))
    with pytest.raises(ConfigError, match=r"cannot write a \.txt picture"):
        plot_records([a], tmp_path / "x.txt")
    with pytest.raises(ConfigError, match="is a directory"):
        plot_records([a], tmp_path)


def test_missing_matplotlib_is_a_config_error(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ConfigError, match=r"pip install 'gnnpar\[plot\]'"):
        plot_records([_write(tmp_path / "a", _record(2))], tmp_path / "x.png")


# --- partitions ----------------------------------------------------------------------


def test_partition_picture(partition_dir: Path, tmp_path: Path) -> None:
    out = plot_partition(partition_dir, tmp_path / "pics" / "part.png")
    pixels = _pixels(out)
    assert pixels.shape[:2] == _size(PARTITION_FIGSIZE) == (500, 1200)
    _assert_not_blank(pixels)
    for colour in RUN_COLORS[:3]:  # owned, halo and edge bars
        assert _count(pixels, colour) > 2000


def test_partition_without_quality_or_parts(partition_dir: Path, tmp_path: Path) -> None:
    meta_path = partition_dir / "meta.json"
    # As gnnpar 0.1 wrote them (format version 1: no digest, parts and quality optional).
    meta = {**json.loads(meta_path.read_text()), "format_version": 1}
    del meta["digest"], meta["feature_dtype"], meta["edge_dim"], meta["neg_kind"]
    meta["files"] = {rel: d for rel, d in meta["files"].items()  # version 3 added these
                     if Path(rel).stem not in EDGE_DTYPES}
    meta["parts"] = [{k: v for k, v in p.items() if not k.endswith("_edges") or
                      k == "num_edges"} for p in meta["parts"]]
    without_parts = {k: v for k, v in meta.items() if k != "parts"}  # falls back on quality
    meta_path.write_text(json.dumps(without_parts))
    _assert_not_blank(_pixels(plot_partition(partition_dir, tmp_path / "q.png")))
    without_quality = {k: v for k, v in meta.items() if k != "quality"}
    meta_path.write_text(json.dumps(without_quality))
    _assert_not_blank(_pixels(plot_partition(partition_dir, tmp_path / "p.png")))
    meta_path.write_text(json.dumps({k: v for k, v in without_parts.items()
                                     if k != "quality"}))
    with pytest.raises(PartitionError, match="no per-part figures"):
        plot_partition(partition_dir, tmp_path / "n.png")
    with pytest.raises(PartitionError, match="does not exist"):
        plot_partition(tmp_path / "nowhere", tmp_path / "n.png")


# --- command line --------------------------------------------------------------------


def test_cli_writes_the_picture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _two_runs(tmp_path)
    out = tmp_path / "cli.png"
    assert main([str(a.parent), str(b), "--out", str(out), "--label", "a", "--label", "b"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    pixels = _pixels(out)
    assert _count(pixels, RUN_COLORS[0]) > 500 and _count(pixels, RUN_COLORS[1]) > 500


def test_cli_partition(partition_dir: Path, tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "part.png"
    assert main(["--partition", str(partition_dir), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out) and out.is_file()
    assert main([str(partition_dir), "--out", str(tmp_path / "b.png")]) == 1  # not a run
    assert "--partition" in capsys.readouterr().err


def test_cli_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "other", {**_record(1), "format": "something-else"})
    assert main([str(path), "--out", str(tmp_path / "x.png")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gnnpar-plot: error: ")
    assert str(path) in lines[0] and "format" in lines[0]
    assert not (tmp_path / "x.png").exists()
    assert main(["--out", str(tmp_path / "x.png")]) == 1
    assert "nothing to draw" in capsys.readouterr().err


def test_import_is_light_and_help_answers() -> None:
    code = ("import sys, gnnpar.plot; "
            "heavy = [m for m in ('torch', 'matplotlib') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)
    res = subprocess.run([sys.executable, "-m", "gnnpar.plot", "--help"], check=True,
                         capture_output=True, text=True)
    assert "RECORD" in res.stdout and "--out" in res.stdout


def test_plot_table_draws_one_bar_colour_per_column(tmp_path: Path) -> None:
    from gnnpar.plot import RUN_COLORS, plot_table

    out = plot_table("epochs", {"sbm": {"A": 2.0, "B": 3.0}, "rmat": {"A": 1.0, "B": 1.5}},
                     tmp_path / "table.png", "s / epoch")
    image = matplotlib.image.imread(out)
    assert image.shape[0] == 450 and image.shape[1] >= 600
    for colour in RUN_COLORS[:2]:
        rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
        assert (np.abs(image[..., :3] * 255 - rgb).max(axis=-1) < 4).sum() > 500, colour


def test_titles_epochs_visible_series_and_small_kinds(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Titled by task, epochs from 1 as the logs, equal val/test both drawn, a log axis."""
    import gnnpar.plot as plot

    figures: list[Any] = []
    monkeypatch.setattr(plot, "_save", lambda fig, out, overwrite: figures.append(fig) or Path(out))
    node = _record(3, kinds={"feature": 50_000_000, "grad": 20_000})
    for e in node["epochs"]:
        e["test_acc"] = e["val_acc"]  # the same figure: the test line must still show
    plot.plot_records([_write(tmp_path / "node", node)], tmp_path / "a.png")
    acc, _, _, comm = figures[-1].axes[:4]
    assert acc.get_title() == "(a) Accuracy"
    assert min(min(line.get_xdata()) for line in acc.lines) == 1  # epoch 0 is "epoch 1"
    markers = {line.get_marker(): line for line in acc.lines}
    assert set(markers) >= {"o", "x"}  # validation hollow circles, test crosses on top
    assert acc.lines.index(markers["x"]) > acc.lines.index(markers["o"])
    assert comm.get_yscale() == "log" and "log scale" in comm.get_ylabel()
    link = _record(2)
    for e in link["epochs"]:
        e.update(val_mrr=0.3, test_mrr=0.31)
    plot.plot_records([_write(tmp_path / "link", link)], tmp_path / "b.png")
    assert figures[-1].axes[0].get_title().startswith("(a) Link prediction")
