"""``gnnpar-plot``: pictures of run records and partitions, as PNG files.

Usage::

    gnnpar-plot RECORD [RECORD ...] --out FILE.png [--label NAME ...]
    gnnpar-plot --partition DIR --out FILE.png

A ``RECORD`` is a run record (``RUNDIR/record.json``, written by ``gnnpar-train``) or
the run directory that holds it.  Two pictures:

- :func:`plot_records` overlays one or more runs, one colour per run (the figure's legend
  names them), in four panels, epochs numbered from 1 as the logs number them: (a)
  accuracy per epoch (MRR for link prediction, titled by task), train solid, validation
  dashed with hollow circles, test dotted with crosses drawn on top (so equal
  validation and test figures both show; epochs without an evaluation are skipped),
  and at the last epoch a star for the run's final full-neighbour validation (hollow)
  and test accuracy, where the run took them (``--eval full``: the per-epoch figures of
  sample mode are on sampled neighbourhoods);
  (b) the training loss per epoch; (c) the time per epoch, training solid and
  evaluation dashed; (d) the bytes communicated per epoch by kind (``feature``,
  ``grad``, ``halo``, ...), one marker per kind, training traffic (the record's
  ``comm``) solid and evaluation traffic (``eval_comm``) dashed with hollow markers, on
  a log scale when the kinds span more than 1.5 decades (small kinds stay legible).
  Bytes are shown in MB (10^6 bytes).  A run that is still going is drawn up to its
  last finished epoch.
- :func:`plot_partition` shows a partition directory's ``meta.json``: (a) owned and halo
  nodes of every part, side by side; (b) the in-edges every part stores; the title gives
  the edge cut, the replication factor and the imbalance (``partition.quality``).

matplotlib is an optional dependency (``pip install 'gnnpar[plot]'``), imported only
when a picture is drawn, with the non-interactive Agg canvas and matplotlib's default
style (so neither a display nor the user's ``matplotlibrc`` changes the output); this
module imports neither matplotlib nor torch, so ``gnnpar-plot --help`` answers at once.
Every picture is written atomically: to a temporary file next to ``out``, renamed over
it when complete.  A picture carries gnnpar's marker in its metadata (PNG text, SVG and
PDF creator): an existing ``out`` is replaced only with ``--overwrite`` and only when it
is a picture gnnpar drew; nothing is drawn inside a gnnpar directory.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from gnnpar.artifacts.files import atomic_file, remove_stale_temporaries
from gnnpar.artifacts.kinds import PREVIOUS_RUN, RECORD_FILE, RUN_RECORD
from gnnpar.artifacts.lock import lock
from gnnpar.artifacts.ownership import check_output_files
from gnnpar.config import ArgumentParser
from gnnpar.errors import ConfigError, GnnparError, PartitionError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.typing import LineStyleType

PROG = "gnnpar-plot"
PICTURE_TYPES = ("png", "svg", "pdf")
"""The picture types drawn (each carries gnnpar's marker in its metadata)."""
MARKER = "gnnpar-plot"
"""The creator gnnpar writes into a picture's metadata: what makes it gnnpar's to replace."""
DPI = 100
"""Dots per inch of every picture: a ``(w, h)``-inch figure is ``w*DPI x h*DPI`` pixels."""
RECORDS_FIGSIZE = (12.0, 8.0)
"""Size in inches of :func:`plot_records`' picture."""
PARTITION_FIGSIZE = (12.0, 5.0)
"""Size in inches of :func:`plot_partition`' picture."""
RUN_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
              "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
"""Colour of run ``i`` is ``RUN_COLORS[i % 10]`` (matplotlib's ``tab10``, its default cycle)."""
KIND_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">", "h", "p")
"""Marker of each communication kind, in sorted order of the kinds of all runs."""
MB = 1e6
_STYLE_COLOR = "#444444"  # legend entries that explain a line style, not a run
_INSTALL_FIX = "pip install 'gnnpar[plot]' (or pip install 'matplotlib>=3.6')."


@dataclass
class RunSeries:
    """What :func:`plot_records` draws of one run, read from its record.

    Attributes:
        label: Legend entry of the run.
        path: The record file.
        status: The record's ``status`` (``"running"``, ``"complete"``, ...), if any.
        epochs: Epoch number of every recorded epoch.
        metrics: ``train_loss``, ``train_acc``, ``val_acc``, ``test_acc``, ``val_mrr``,
            ``test_mrr`` (link prediction), ``epoch_time_s`` and ``eval_time_s`` per
            epoch; ``None`` where the record has ``null`` (or no value, or a non-finite
            one).
        comm: Training traffic: ``kind -> MB per epoch`` (0 where a kind sent nothing).
        eval_comm: Evaluation traffic, like ``comm``; ``None`` in the epochs without an
            evaluation (an empty ``eval_comm``).
        final: The run's final full-neighbour accuracies (``val_acc``, ``test_acc``),
            from the summary of a finished node-task run that took them (``--eval
            full``); empty otherwise (its final figures are its last epoch's).
    """

    label: str
    path: Path
    status: str | None
    epochs: list[int] = field(default_factory=list)
    metrics: dict[str, list[float | None]] = field(default_factory=dict)
    comm: dict[str, list[float | None]] = field(default_factory=dict)
    eval_comm: dict[str, list[float | None]] = field(default_factory=dict)
    final: dict[str, float] = field(default_factory=dict)


_METRICS = ("train_loss", "train_acc", "val_acc", "test_acc", "val_mrr", "test_mrr",
            "epoch_time_s", "eval_time_s")
_RECORD_FIX = "pass a run record written by gnnpar-train (RUNDIR/record.json) or its RUNDIR."


def record_path(path: str | os.PathLike[str]) -> Path:
    """The record file of ``path``: ``path/record.json`` for a run directory, else ``path``."""
    p = Path(path)
    return p / RECORD_FILE if p.is_dir() else p


def read_run(path: str | os.PathLike[str], label: str | None = None) -> RunSeries:
    """Read and check one run record (format ``gnnpar-run``, versions 2 and 3).

    Args:
        path: The record file, or the run directory that holds ``record.json``.
        label: Legend entry; by default the name of the directory that holds the record.

    Returns:
        The series to draw.

    Raises:
        ConfigError: The file is missing, not JSON, of another format or version, or a
            field has a value of the wrong type (the message names the file and the field).
    """
    p = record_path(path)
    if not p.exists() and (Path(path) / "meta.json").is_file():
        raise ConfigError("is a partition directory, not a run directory.", path=path,
                          fix=f"draw it with `{PROG} --partition {path} --out FILE.png`.")
    if not p.exists() and (p.parent / PREVIOUS_RUN).is_dir():
        from gnnpar.train.rundir import settle_for_reading

        settle_for_reading(p.parent)  # a killed --overwrite's run, put back
    doc = RUN_RECORD.read(p, ConfigError, _RECORD_FIX)
    epochs = doc.get("epochs", [])
    if not isinstance(epochs, list):
        raise ConfigError(f"expected a list of epochs, got {type(epochs).__name__}.", path=p,
                          field="epochs", fix=_RECORD_FIX)
    status = doc.get("status")
    run = RunSeries(label=label if label is not None else _default_label(p), path=p,
                    status=status if isinstance(status, str) else None,
                    metrics={m: [] for m in _METRICS})
    train_kinds: list[dict[str, float]] = []
    eval_kinds: list[dict[str, float] | None] = []
    for i, entry in enumerate(epochs):
        where = f"epochs[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"expected an object, got {entry!r}.", path=p, field=where,
                              fix=_RECORD_FIX)
        epoch = entry.get("epoch", i)
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            raise ConfigError(f"expected an integer, got {epoch!r}.", path=p,
                              field=f"{where}.epoch", fix=_RECORD_FIX)
        run.epochs.append(epoch)
        for m in _METRICS:
            run.metrics[m].append(_number(entry.get(m), p, f"{where}.{m}"))
        train_kinds.append(_comm_mb(entry.get("comm"), p, f"{where}.comm"))
        ev = _comm_mb(entry.get("eval_comm"), p, f"{where}.eval_comm")
        eval_kinds.append(ev or None)
    run.comm = _by_kind(train_kinds, missing=0.0)
    run.eval_comm = _by_kind(eval_kinds, missing=0.0)
    summary = doc.get("summary")
    if isinstance(summary, dict) and summary.get("eval") == "full" and \
            summary.get("task") != "link":
        for key in ("val_acc", "test_acc"):
            value = _number(summary.get(key), p, f"summary.{key}")
            if value is not None:
                run.final[key] = value
    return run


def plot_records(
    paths: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    labels: Sequence[str] | None = None,
    overwrite: bool = False,
) -> Path:
    """Draw run records into one picture of four panels (see the module docstring).

    Args:
        paths: Run records (``record.json``) or run directories; one colour per run, in
            this order (:data:`RUN_COLORS`).
        out: Picture to write (``.png``; ``.svg`` and ``.pdf`` work too); its directory is
            created.  The picture is :data:`RECORDS_FIGSIZE` inches at :data:`DPI`.
        labels: Legend entry of each run; by default the name of the directory that holds
            each record.
        overwrite: Replace a picture gnnpar drew at ``out`` (never another file).

    Returns:
        The path written.

    Raises:
        ConfigError: No records, a label count that does not match, a record that cannot
            be read (see :func:`read_run`), an unsupported picture type, or matplotlib is
            not installed.
    """
    if not paths:
        raise ConfigError("no run records given.", field="paths",
                          fix="pass at least one record.json or run directory.")
    if labels is not None and len(labels) != len(paths):
        raise ConfigError(f"{len(labels)} labels for {len(paths)} records.", field="labels",
                          fix="give one label per record, in the same order, or none.")
    runs = [read_run(p, None if labels is None else labels[i]) for i, p in enumerate(paths)]
    with _figure(RECORDS_FIGSIZE) as fig:
        from matplotlib.lines import Line2D

        ax = fig.subplots(2, 2)
        kinds = sorted({k for r in runs for k in (*r.comm, *r.eval_comm)})
        markers = {k: KIND_MARKERS[j % len(KIND_MARKERS)] for j, k in enumerate(kinds)}
        links = [any(v is not None for v in r.metrics["test_mrr"]) for r in runs]
        for i, run in enumerate(runs):
            color = RUN_COLORS[i % len(RUN_COLORS)]
            epochs = [e + 1 for e in run.epochs]  # numbered as the logs: 1, 2, ...
            for metric, ls, marker in (("train_acc", "-", ""), ("val_acc", "--", "o"),
                                       ("test_acc", ":", "x")):
                if links[i] and metric != "train_acc":  # link prediction: MRR instead
                    metric = metric.replace("_acc", "_mrr")
                # Validation hollow and larger, test crosses on top: both show when equal.
                _line(ax[0, 0], epochs, run.metrics[metric], color, ls, marker,
                      hollow=marker == "o", size=7.0 if marker == "o" else 5.0)
            for key, hollow in (("val_acc", True), ("test_acc", False)):
                if key in run.final and epochs:  # the final full-neighbour figures
                    ax[0, 0].plot([epochs[-1]], [run.final[key]], linestyle="none",
                                  marker="*", markersize=14, color=color,
                                  markerfacecolor="white" if hollow else color)
            _line(ax[0, 1], epochs, run.metrics["train_loss"], color, "-")
            _line(ax[1, 0], epochs, run.metrics["epoch_time_s"], color, "-")
            _line(ax[1, 0], epochs, run.metrics["eval_time_s"], color, "--")
            for kind, series in run.comm.items():
                _line(ax[1, 1], epochs, series, color, "-", markers[kind], skip_zero=True)
            for kind, series in run.eval_comm.items():
                _line(ax[1, 1], epochs, series, color, "--", markers[kind],
                      hollow=True, skip_zero=True)
        _log_scale_if_spread(ax[1, 1])

        def style(name: str, ls: LineStyleType = "-", marker: str = "",
                  hollow: bool = False) -> Line2D:
            return Line2D([], [], color=_STYLE_COLOR, linestyle=ls, marker=marker,
                          markerfacecolor="none" if hollow else _STYLE_COLOR, label=name)

        title, ylabel = ("(a) Link prediction: train accuracy, validation and test MRR",
                         "accuracy / MRR") if all(links) else (
            "(a) Accuracy", "accuracy") if not any(links) else (
            "(a) Accuracy (link prediction runs: validation and test MRR)", "accuracy / MRR")
        finals = [style("final full-neighbour validation", "none", "*", hollow=True),
                  style("final full-neighbour test", "none", "*")] if any(
                      r.final for r in runs) else []
        _finish(ax[0, 0], title, ylabel,
                [style("train"), style("validation", "--", "o", hollow=True),
                 style("test", ":", "x"), *finals])
        _finish(ax[0, 1], "(b) Training loss", "loss", [])
        _finish(ax[1, 0], "(c) Time per epoch", "seconds",
                [style("training"), style("evaluation", "--")])
        _finish(ax[1, 1], "(d) Bytes communicated per epoch", "MB (10^6 bytes)"
                + (", log scale" if ax[1, 1].get_yscale() == "log" else ""),
                [style(k, "none", markers[k]) for k in kinds]
                + ([style("training"), style("evaluation", "--", "o", hollow=True)]
                   if kinds else []),
                empty="no communication recorded")
        handles = [Line2D([], [], color=RUN_COLORS[i % len(RUN_COLORS)], linewidth=2.5,
                          label=r.label) for i, r in enumerate(runs)]
        ncol = min(len(runs), 4)
        rows = math.ceil(len(runs) / ncol)
        fig.legend(handles=handles, loc="upper center", ncol=ncol, frameon=False,
                   bbox_to_anchor=(0.5, 1.0))
        fig.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - 0.035 * rows - 0.01))
        return _save(fig, out, overwrite)


def plot_partition(part_dir: str | os.PathLike[str], out: str | os.PathLike[str],
                   overwrite: bool = False) -> Path:
    """Draw a partition's per-part load and its edge cut (see the module docstring).

    Args:
        part_dir: A partition directory (``gnnpar-partition``'s output).
        out: Picture to write (``.png``; ``.svg`` and ``.pdf`` work too); its directory is
            created.  The picture is :data:`PARTITION_FIGSIZE` inches at :data:`DPI`.
        overwrite: Replace a picture gnnpar drew at ``out`` (never another file).

    Returns:
        The path written.

    Raises:
        PartitionError: ``meta.json`` is missing or malformed, or holds no per-part figures.
        ConfigError: An unsupported picture type, or matplotlib is not installed.
    """
    from gnnpar.partition.format import META_FILE, PartitionMeta  # numpy, scipy

    meta = PartitionMeta.load(part_dir)
    path = Path(part_dir) / META_FILE
    owned, halo, edges = _part_loads(meta.parts, meta.quality, path)
    k = len(owned)
    with _figure(PARTITION_FIGSIZE) as fig:
        from matplotlib.ticker import MaxNLocator

        ax_nodes, ax_edges = fig.subplots(1, 2)
        x = list(range(k))
        ax_nodes.bar([i - 0.2 for i in x], owned, width=0.4, color=RUN_COLORS[0], label="owned")
        ax_nodes.bar([i + 0.2 for i in x], halo, width=0.4, color=RUN_COLORS[1], label="halo")
        ax_edges.bar(x, edges, width=0.6, color=RUN_COLORS[2])
        for a, title, ylabel in ((ax_nodes, "(a) Nodes per part", "nodes"),
                                 (ax_edges, "(b) Stored in-edges per part", "edges")):
            a.set_title(title)
            a.set_xlabel("part")
            a.set_ylabel(ylabel)
            if k <= 20:
                a.set_xticks(x)
            else:
                a.xaxis.set_major_locator(MaxNLocator(integer=True))
            a.grid(axis="y", alpha=0.3)
            a.set_axisbelow(True)
            a.margins(y=0.15)  # room for the legend above the bars
        ax_nodes.legend(loc="upper right", ncol=2, fontsize="small")
        fig.suptitle(_partition_title(meta.name, k, meta.num_nodes, meta.num_edges,
                                      meta.halo_hops, meta.partitioner, meta.quality))
        fig.tight_layout()
        return _save(fig, out, overwrite)


def build_parser() -> argparse.ArgumentParser:
    """The ``gnnpar-plot`` argument parser."""
    p = ArgumentParser(
        prog=PROG, description="Draw run records (accuracy, loss, epoch time, bytes "
        "communicated per epoch) or a partition (per-part nodes, halo, edges, edge cut) "
        "into a PNG file.",
        epilog=f"Examples: '{PROG} runs/a runs/b --out cmp.png --label cache --label "
        f"no-cache'; '{PROG} --partition parts/sbm-4 --out parts.png'.")
    p.add_argument("records", nargs="*", metavar="RECORD",
                   help=f"a run record (RUNDIR/{RECORD_FILE}) or its run directory")
    p.add_argument("--out", required=True, metavar="FILE.png", help="picture to write")
    p.add_argument("--label", action="append", metavar="NAME",
                   help="legend entry of each RECORD, in order (default: its directory name)")
    p.add_argument("--partition", metavar="DIR",
                   help="draw this partition directory instead of run records")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the picture gnnpar drew at --out earlier")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gnnpar-plot``; print the picture's path and return the exit status.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 1 on a gnnpar error (printed as one ``gnnpar-plot: error: ...`` line).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_picture_out(args.out, args.overwrite)
        if args.partition is not None:
            if args.records or args.label:
                raise ConfigError("--partition draws a partition, not run records.",
                                  field="--partition",
                                  fix="plot run records and partitions in separate calls.")
            written = plot_partition(args.partition, args.out, args.overwrite)
        elif not args.records:
            raise ConfigError("nothing to draw.", field="RECORD",
                              fix="pass run records (or run directories), or --partition DIR.")
        else:
            written = plot_records(args.records, args.out, args.label, args.overwrite)
    except GnnparError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    print(written)
    return 0


# --- records -------------------------------------------------------------------------


def _default_label(p: Path) -> str:
    return p.resolve().parent.name or str(p)


def _number(value: Any, path: Path, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"expected a number or null, got {value!r}.", path=path, field=where,
                          fix=_RECORD_FIX)
    v = float(value)
    return v if math.isfinite(v) else None


def _comm_mb(comm: Any, path: Path, where: str) -> dict[str, float]:
    """``{kind: {"bytes": b, ...}}`` -> ``{kind: b / 1e6}``; ``None`` or missing -> ``{}``."""
    if comm is None:
        return {}
    if not isinstance(comm, dict):
        raise ConfigError(f"expected an object of kinds, got {comm!r}.", path=path,
                          field=where, fix=_RECORD_FIX)
    out = {}
    for kind, counts in comm.items():
        if not isinstance(counts, dict):
            raise ConfigError(f"expected {{'rows': ..., 'bytes': ...}}, got {counts!r}.",
                              path=path, field=f"{where}.{kind}", fix=_RECORD_FIX)
        b = _number(counts.get("bytes", 0), path, f"{where}.{kind}.bytes")
        out[str(kind)] = 0.0 if b is None else b / MB
    return out


def _by_kind(per_epoch: Sequence[Mapping[str, float] | None],
             missing: float) -> dict[str, list[float | None]]:
    """Per-epoch ``{kind: value}`` -> ``{kind: [value per epoch]}``; ``None`` epochs stay gaps."""
    kinds = sorted({k for e in per_epoch if e for k in e})
    return {k: [None if e is None else e.get(k, missing) for e in per_epoch] for k in kinds}


def _line(ax: Axes, epochs: Sequence[int], values: Sequence[float | None], color: str,
          linestyle: str, marker: str = "o", hollow: bool = False,
          skip_zero: bool = False, size: float = 4.5) -> None:
    """Plot the epochs that have a value (a series that is all gaps or zeros draws nothing)."""
    pts = [(e, v) for e, v in zip(epochs, values, strict=True)
           if v is not None and not (skip_zero and v == 0)]
    if not pts:
        return
    ax.plot([e for e, _ in pts], [v for _, v in pts], color=color, linestyle=linestyle,
            linewidth=2.0, marker=marker, markersize=size,
            markerfacecolor="white" if hollow else color)


def _log_scale_if_spread(ax: Axes, decades: float = 1.5) -> None:
    """A log value axis when the positive values span more than ``decades`` decades.

    So that small kinds are not piled up at the bottom under large ones.
    """
    ys = [cast("Sequence[float]", line.get_ydata()) for line in ax.lines]
    values = [float(v) for y in ys for v in y if float(v) > 0]
    if values and math.log10(max(values) / min(values)) > decades:
        ax.set_yscale("log")


def _finish(ax: Axes, title: str, ylabel: str, style_handles: list[Any],
            empty: str = "nothing recorded yet") -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_title(title)
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if not ax.lines:
        ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center", va="center",
                color="0.5")
    elif style_handles:
        ax.legend(handles=style_handles, fontsize="small", loc="best")


# --- partitions ----------------------------------------------------------------------


def _part_loads(parts: Sequence[Mapping[str, Any]], quality: Mapping[str, Any],
                path: Path) -> tuple[list[int], list[int], list[int]]:
    """Owned nodes, halo nodes and stored in-edges per part, from ``parts`` (or ``quality``)."""
    if parts:
        cols: list[list[int]] = [[], [], []]
        for k, part in enumerate(parts):
            for col, key in zip(cols, ("num_owned", "num_halo", "num_edges"), strict=True):
                v = part.get(key) if isinstance(part, Mapping) else None
                if isinstance(v, bool) or not isinstance(v, int):
                    raise PartitionError(f"expected an integer, got {v!r}.", path=path,
                                         field=f"parts[{k}].{key}",
                                         fix="re-create the partition with gnnpar-partition.")
                col.append(v)
        return cols[0], cols[1], cols[2]
    per_part = quality.get("per_part") if isinstance(quality, Mapping) else None
    if isinstance(per_part, Mapping) and all(
            isinstance(per_part.get(c), list) for c in ("owned", "halo", "edges")):
        return (list(per_part["owned"]), list(per_part["halo"]), list(per_part["edges"]))
    raise PartitionError("meta.json holds no per-part figures (neither parts nor "
                         "quality.per_part).", path=path, field="parts",
                         fix="re-create the partition with this gnnpar's gnnpar-partition.")


def _partition_title(name: str, k: int, num_nodes: int, num_edges: int, halo_hops: int,
                     partitioner: Mapping[str, Any], quality: Mapping[str, Any]) -> str:
    method = partitioner.get("method", "?") if isinstance(partitioner, Mapping) else "?"
    head = (f"{name}: {k} parts ({method}), {num_nodes:,} nodes, {num_edges:,} edges, "
            f"halo hops {halo_hops}")
    cut, share = quality.get("edge_cut"), quality.get("edge_cut_share")
    if not isinstance(cut, (int, float)):
        return f"{head}\nedge cut not recorded in meta.json"
    tail = f"edge cut {int(cut):,} of {num_edges:,} edges"
    if isinstance(share, (int, float)):
        tail += f" ({100 * share:.2f}%)"
    rf = quality.get("replication_factor")
    if isinstance(rf, (int, float)):
        tail += f", replication factor {rf:.3f}"
    imb = quality.get("imbalance")
    if isinstance(imb, Mapping):
        shown = [f"{q} {imb[q]:.3f}" for q in ("nodes", "edges", "halo")
                 if isinstance(imb.get(q), (int, float))]
        if shown:
            tail += ", max/mean " + ", ".join(shown)
    return f"{head}\n{tail}"


def plot_table(title: str, rows: Mapping[str, Mapping[str, float]],
               out: str | os.PathLike[str], ylabel: str = "", overwrite: bool = False) -> Path:
    """Grouped bars of a benchmark's table: one group per row, one bar per column.

    Args:
        title: Figure title (say the machine and the date).
        rows: ``{row label: {column label: value}}``; a missing value leaves a gap.
        out: PNG (or SVG / PDF) to write, atomically.
        ylabel: Label of the value axis.
        overwrite: Replace a picture gnnpar drew at ``out`` (never another file).

    Returns:
        The path written.
    """
    columns = list(dict.fromkeys(c for r in rows.values() for c in r))
    with _figure((max(6.0, 1.5 * len(rows) + 3.0), 4.5)) as fig:
        ax = fig.add_subplot()
        width = 0.8 / max(len(columns), 1)
        for j, column in enumerate(columns):
            xs = [i + (j - (len(columns) - 1) / 2) * width
                  for i, r in enumerate(rows.values()) if column in r]
            ys = [r[column] for r in rows.values() if column in r]
            bars = ax.bar(xs, ys, width, label=column, color=RUN_COLORS[j % len(RUN_COLORS)])
            ax.bar_label(bars, fmt="%.3g", fontsize=8)
        ax.set_xticks(range(len(rows)), list(rows))
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        return _save(fig, out, overwrite)


# --- figures -------------------------------------------------------------------------


@contextlib.contextmanager
def _figure(figsize: tuple[float, float]) -> Iterator[Figure]:
    """A figure on an Agg canvas in matplotlib's default style, without pyplot."""
    try:
        import matplotlib.style
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ConfigError(f"matplotlib is needed to draw pictures ({exc}).",
                          field="matplotlib", fix=_INSTALL_FIX) from exc
    with matplotlib.style.context("default"):
        fig = Figure(figsize=figsize, dpi=DPI)
        FigureCanvasAgg(fig)
        yield fig


def is_gnnpar_picture(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a picture gnnpar drew (its metadata holds :data:`MARKER`)."""
    window = 1 << 16
    try:
        with open(path, "rb") as f:
            head = f.read(window)
            f.seek(max(0, os.path.getsize(path) - window))
            tail = f.read()
    except OSError:
        return False
    return MARKER.encode() in head or MARKER.encode() in tail


def check_picture_out(out: str | os.PathLike[str], overwrite: bool) -> Path:
    """Refuse a picture ``out`` gnnpar may not write (before anything is drawn)."""
    p = Path(out)
    check_output_files([p], overwrite, is_gnnpar_picture, ConfigError, what="a picture",
                       overwrite_hint="pass --overwrite to replace the picture gnnpar drew "
                       "there, or another --out.")
    fmt = p.suffix[1:].lower()
    if fmt not in PICTURE_TYPES:
        raise ConfigError(f"cannot write a .{fmt} picture.", path=p, field="out",
                          fix="name the output FILE.png (or .svg, .pdf).")
    return p


def _save(fig: Figure, out: str | os.PathLike[str], overwrite: bool) -> Path:
    """Write ``fig`` to ``out`` atomically (temporary sibling, then ``os.replace``)."""
    path = check_picture_out(out, overwrite)
    fmt = path.suffix[1:].lower()
    key = "Software" if fmt == "png" else "Creator"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot be created ({exc.strerror or exc}).", path=path.parent,
                          field="out", fix="draw it under a writable directory.") from None
    with lock(path, ConfigError, "this picture"):
        check_picture_out(path, overwrite)  # again, now that no one else writes it
        remove_stale_temporaries(path)
        with atomic_file(path, f"the picture {path.name}") as tmp, open(tmp, "xb") as f:
            fig.savefig(f, format=fmt, dpi=DPI, metadata={key: MARKER})
    return path


if __name__ == "__main__":
    sys.exit(main())
