"""``gnnpar-predict``: a trained run applied to a graph, exact full-neighbour inference.

Usage::

    gnnpar-predict RUN_DIR DATASET_OR_PARTITION [--nproc K] --out DIR [data flags]

The run's model (its configuration and checkpoint) runs on every node of the graph --
the training graph or a new one with the same feature width, a partition directory or a
dataset spec partitioned into ``K`` parts first (cached under ``ROOT/partitions`` as
``gnnpar-train`` caches) -- layer by layer with every in-neighbour
(:mod:`gnnpar.nn.inference`), one process per part.  Each rank writes its owned rows
into ``DIR`` as ``gnnpar-train --save-predictions`` does (logits and classes, or a link
run's embeddings; ``--save-embeddings [LAYER]`` adds a layer's embeddings), read back
in dataset order with ``gnnpar.load_predictions(DIR)``.  A graph with labels and a split
also gets each split's accuracy.  Every check that needs no worker -- the run, the
feature width, ``DIR`` -- runs before any worker starts.

``DIR`` is new, empty, or (with ``--overwrite``) a predictions directory gnnpar wrote
-- never a user's directory, a link, or a place inside a run or partition directory.
It is locked while the command runs, written aside and renamed into place; its index
binds the predictions to the run's checkpoint and the graph's partition.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnpar.artifacts.directory import open_staging, staging_dir
from gnnpar.artifacts.kinds import INDEX_FILE, PREDICTIONS, PREDICTIONS_INDEX
from gnnpar.artifacts.lock import lock
from gnnpar.artifacts.ownership import check_output_dir
from gnnpar.config import ArgumentParser, add_config_arguments, option, parse_config
from gnnpar.console import log_to_stderr
from gnnpar.datasets.config import DataConfig
from gnnpar.errors import ConfigError, GnnparError
from gnnpar.partition.config import PartitionConfig
from gnnpar.train.trained import TrainedRun

PROG = "gnnpar-predict"


@dataclass
class PredictRun:
    """Where the predictions go and how the inference runs."""

    out: str = option("", metavar="DIR")
    """Directory of the predictions (new or empty; --overwrite replaces predictions gnnpar
    wrote there)."""

    overwrite: bool = False
    """Replace the predictions gnnpar wrote in --out earlier (nothing else is replaced)."""

    nproc: int | None = None
    """Worker processes on this machine, one part each (default: one)."""

    device: str | None = None
    """cpu or cuda (default: the local rank's GPU when torch sees one, else cpu)."""

    eval_budget_mb: float = 64.0
    """MiB per chunk of destination nodes of the layer-wise inference."""

    save_embeddings: int | None = option(None, const=0, metavar="LAYER")
    """Also write the embeddings of layer LAYER (without LAYER: the last hidden layer;
    a link run's embeddings are written anyway)."""

    timeout_s: float = 300.0
    """Collective timeout in seconds."""

    best: bool = False
    """Predict with the run's best-valid model (RUN_DIR/best) instead of its newest
    checkpoint."""


@dataclass
class PredictConfig:
    """``gnnpar-predict``'s settings: the graph, its partitioning, the outputs."""

    data: DataConfig = field(default_factory=DataConfig)
    """The graph to predict on."""

    partition: PartitionConfig = field(default_factory=PartitionConfig)
    """How a dataset spec is partitioned."""

    predict: PredictRun = field(default_factory=PredictRun)
    """Outputs and processes."""


def build_parser() -> argparse.ArgumentParser:
    """The ``gnnpar-predict`` argument parser."""
    p = ArgumentParser(prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Apply a trained gnnpar-train run to a graph (exact "
                       "full-neighbour inference) and write every node's predictions.",
                       epilog=f"Examples:\n  {PROG} runs/sbm-sample synthetic:sbm --nproc 2 "
                       "--out preds\n  {PROG} runs/sbm-sample \"synthetic:sbm?seed=7\" --out "
                       "preds-7".replace("{PROG}", PROG))
    p.add_argument("run_dir", metavar="RUN_DIR", help="a gnnpar-train run directory")
    add_config_arguments(p, PredictConfig)
    return p


def settings(run_dir: str, pc: PredictConfig) -> tuple[Any, TrainedRun]:
    """The run's configuration for inference on ``pc``'s graph (checked, no data read)."""
    from gnnpar.train.config import FullConfig, LinkConfig
    from gnnpar.train.trained import model_spec, read_run

    run = read_run(run_dir, pc.predict.best)
    model_spec(run)  # refuses typed and featureless runs
    cfg = run.config
    p = pc.predict
    if not p.out:
        raise ConfigError("no output directory.", field="predict.out",
                          fix="pass --out DIR.")
    node = cfg.data.task == "node"  # a link run writes its encoder's embeddings
    run_cfg = dataclasses.replace(cfg.run, out=p.out, nproc=p.nproc, device=p.device,
                                  timeout_s=p.timeout_s, resume=False,
                                  overwrite=p.overwrite, save_predictions=node,
                                  save_embeddings=p.save_embeddings if node
                                  else cfg.model.layers)
    train = dataclasses.replace(cfg.train, eval_budget_mb=p.eval_budget_mb, precision="fp32")
    # The graph is read for its nodes: it needs neither labels nor supervision edges.
    data = dataclasses.replace(pc.data, task="node")
    return dataclasses.replace(cfg, data=data, partition=pc.partition, train=train,
                               run=run_cfg, full=FullConfig(),
                               link=LinkConfig()).validate(), run


def check_out(out: Path, overwrite: bool) -> None:
    """Refuse an ``--out`` that gnnpar-predict may not (re)write (before any work)."""
    check_output_dir(out, overwrite, PREDICTIONS, ConfigError, "pass --overwrite to replace "
                     "the predictions gnnpar wrote there, or another --out.",
                     field="predict.out", empty_ok=True)


def resolve(cfg: Any, record: dict[str, Any], nproc: int) -> Path:
    """The partition to predict on (partitioning a spec), its feature width checked."""
    from gnnpar.partition.format import PartitionMeta
    from gnnpar.partition.writer import partition_graph
    from gnnpar.train.prepare import (
        META_FILE,
        is_partition_dir,
        partition_cache_dir,
        partition_settings,
    )

    d = cfg.data
    if is_partition_dir(d.dataset):
        part_dir = Path(d.dataset).expanduser()
    else:
        part_dir = partition_cache_dir(cfg, nproc)
        if not (part_dir / META_FILE).is_file():
            dataset = d.load()
            partition_graph(dataset, part_dir,
                            dataclasses.replace(partition_settings(cfg), num_parts=nproc),
                            task="node", progress=cfg.run.progress, validate=False)
    meta = PartitionMeta.load(part_dir)
    want = int(record["partition"]["feat_dim"])
    if meta.types is not None or meta.feat_dim != want:
        what = "a typed graph" if meta.types is not None else f"{meta.feat_dim} features"
        raise ConfigError(f"has {what}; the run's model reads {want} features per node.",
                          path=d.dataset, field="feat_dim",
                          fix=f"pass a graph with {want} features per node.")
    if meta.num_parts != nproc:
        raise ConfigError(f"the partition has {meta.num_parts} parts for {nproc} processes.",
                          path=part_dir, field="num_parts",
                          fix=f"pass --nproc {meta.num_parts}.")
    return part_dir


def predict_worker(run_dir: str, cfg: Any, part_dir: str, source: dict[str, Any],
                   best: bool = False) -> None:
    """One rank: the run's model on its part, its rows written (collective).

    Args:
        run_dir: The trained run.
        cfg: The inference settings (:func:`settings`).
        part_dir: The partition predicted on.
        source: What the index binds the predictions to (the run, checkpoint, partition).
        best: Use the best-valid model (``RUN_DIR/best``).
    """
    from datetime import timedelta

    from gnnpar.distributed import init, shutdown
    from gnnpar.storage.graph import DistGraph
    from gnnpar.train.outputs import write_node_outputs
    from gnnpar.train.trained import load_trained

    ctx = init(device=cfg.run.device, timeout=timedelta(seconds=cfg.run.timeout_s))
    done = False
    try:
        graph = DistGraph.load(part_dir, ctx)
        _, _, model, _ = load_trained(run_dir, best)
        write_node_outputs(Path(cfg.run.out), cfg, model.to(ctx.device), graph, ctx,
                           logits=cfg.run.save_predictions, source=source)
        done = True
    finally:
        shutdown(wait=done)


def predict(run_dir: str, cfg: Any, run: TrainedRun, best: bool = False) -> dict[str, Any]:
    """Write the predictions of ``run`` on ``cfg``'s graph into ``cfg.run.out``.

    Holds ``--out``'s lock throughout; a failure leaves the previous predictions (or
    nothing) in place and no staging directory behind.  ``best``: with the best-valid
    model (``RUN_DIR/best``), which ``run`` must have been read with.

    Returns:
        The index written.
    """
    from gnnpar.distributed import check_device
    from gnnpar.partition.format import content_digest

    out = Path(cfg.run.out)
    nproc = cfg.run.nproc or 1
    check_device(cfg.run.device, nproc)  # before any worker: one GPU per process
    with lock(out, ConfigError, "this predictions directory"):
        check_out(out, cfg.run.overwrite)
        shutil.rmtree(open_staging(out))  # writable, before any worker starts
        part_dir = resolve(cfg, run.record, nproc)
        source = {"command": PROG, **run.source, "partition": content_digest(part_dir)}
        args = (run_dir, cfg, str(part_dir), source, best)
        try:
            if cfg.run.nproc is None:
                predict_worker(*args)
            else:
                from gnnpar.train.launch import launch_workers

                launch_workers("gnnpar.train.predict:predict_worker", args, nproc,
                               threads=max(1, (os.cpu_count() or 1) // nproc))
        finally:
            shutil.rmtree(staging_dir(out), ignore_errors=True)  # what a failure left
        return PREDICTIONS_INDEX.read(out / INDEX_FILE, ConfigError, "run gnnpar-predict "
                                      "again.")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``gnnpar-predict``; the exit status."""
    from gnnpar.train.predictions import describe

    log_to_stderr()
    parser = build_parser()
    try:
        pc, ns, _ = parse_config(parser, PredictConfig, argv)
        cfg, run = settings(ns.run_dir, pc)
        check_out(Path(cfg.run.out), pc.predict.overwrite)
        index = predict(str(ns.run_dir), cfg, run, pc.predict.best)
    except GnnparError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    print(f"{cfg.run.out}: {describe(index)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
