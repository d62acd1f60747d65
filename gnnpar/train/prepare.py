"""What ``gnnpar-train`` settles before any worker starts: checks, run directory, partition.

:func:`check_before_start` runs every check that needs no data — the world size against
the partition's parts (and its settings), the device, the run directory — in well under a
second, before a worker is spawned or a dataset read. :func:`resolve_partition` then finds
the partition to train on: a partition directory is used as it is; a dataset spec is
loaded (with ``--features`` / ``--labels`` / ``--split``), checked for its task
(node classification, or link prediction with ``--task link``) and partitioned into
one part per process by the launcher before any worker starts, cached under
``ROOT/partitions`` under a key of every setting and every input file's modification
time and (sampled) content, so a changed input or setting is partitioned anew; a
full-graph run (``--mode full``) balances stored in-edges by default
(:func:`partition_settings`). Under
``torchrun`` every rank has already started, so no rank partitions while the others wait:
a spec without a cached partition is refused with the ``gnnpar-partition`` command that
makes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shlex
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

from gnnpar.artifacts.kinds import CHECKPOINT_DIR, STATE_FILE
from gnnpar.errors import ConfigError, DistributedError, PartitionError
from gnnpar.train.config import Config
from gnnpar.train.rundir import check_resume, dataset_slug, prepare_run_dir

if TYPE_CHECKING:
    from gnnpar.datasets.graph import GraphDataset
    from gnnpar.partition.config import PartitionConfig
    from gnnpar.partition.format import PartitionMeta
    from gnnpar.typed import TypedLayout

META_FILE = "meta.json"
log = logging.getLogger("gnnpar")
FULL_BALANCE = ("nodes", "train", "edges")
"""``--balance`` of a ``--mode full`` run that leaves it at its default: a full-graph step
aggregates over every stored in-edge of a part, so parts get equal in-edges (the
default's ``sampled`` is a sampled minibatch step's work)."""


def is_partition_dir(spec: str) -> bool:
    """Whether the dataset argument names a partition directory (it holds ``meta.json``)."""
    return (Path(spec).expanduser() / META_FILE).is_file()


def _inputs(cfg: Config) -> list[Path]:
    """Every file the dataset is read from (for the cache key)."""
    from gnnpar.datasets.spec import parse_split

    d = cfg.data
    paths = [Path(p).expanduser() for p in (d.dataset, d.features, d.labels) if p]
    split = parse_split(d.split) if d.split else ()
    paths += [Path(p) for p in split if isinstance(p, str)]  # split files, not fractions
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.is_file())
        elif p.exists():
            files.append(p)
    return files


def partition_settings(cfg: Config) -> PartitionConfig:
    """The settings a run partitions a dataset spec with.

    ``cfg.partition``, with the run's ``--fanouts`` and ``--batch-size`` for the work
    model where ``--work-fanouts`` / ``--work-batch-size`` are not given and ``--balance``
    uses them (``work``, ``sampled``; else they would only change the cache's name); but
    a full-graph run (``--mode full``) whose ``--balance`` is the default balances
    :data:`FULL_BALANCE` instead.
    """
    from gnnpar.partition.config import PartitionConfig

    p = cfg.partition
    if cfg.train.mode == "full" and p.balance == PartitionConfig().balance:
        return replace(p, balance=FULL_BALANCE)
    if not {"work", "sampled"} & set(p.balance):
        return p
    return replace(p, work_fanouts=p.work_fanouts or tuple(cfg.sample.fanouts),
                   work_batch_size=p.work_batch_size or int(cfg.sample.batch_size))


def partition_cache_dir(cfg: Config, num_parts: int) -> Path:
    """Where the partition of ``cfg.data`` into ``num_parts`` parts is cached.

    The name holds a readable slug of the spec, the part count, the partitioner and a
    hash of the data and partition settings (but those of :data:`HOW_ONLY`, which do not
    change the partition) and of every input file's path, modification time and content
    (:func:`gnnpar.artifacts.files.content_stamp`: all of a small file, three MiB of a
    large one), so an input edited in place is partitioned anew.
    """
    from gnnpar.artifacts.files import content_stamp
    from gnnpar.partition.config import HOW_ONLY

    d, p = cfg.data, partition_settings(cfg)
    stamp = [(str(f.resolve()), f.stat().st_mtime_ns, content_stamp(f)) for f in _inputs(cfg)]
    made = {k: v for k, v in asdict(p).items() if k not in HOW_ONLY}
    key = json.dumps({"data": {**asdict(d), "root": None}, "partition": made,
                      "num_parts": num_parts, "files": stamp}, sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    name = f"{dataset_slug(d.dataset)}-{num_parts}p-{p.partitioner}-{digest}"
    return Path(d.root) / "partitions" / name


def check_world_size(cfg: Config, world_size: int) -> None:
    """Refuse a world size that does not fit the partition, without loading anything.

    Raises:
        ConfigError: ``--num-parts`` differs from the world size, or the partition
            directory has another number of parts.
    """
    parts = cfg.partition.num_parts
    if parts is not None and parts != world_size:
        raise ConfigError(
            f"--num-parts {parts} with {world_size} processes; gnnpar runs one part per "
            "process.", field="partition.num_parts",
            fix=f"pass --nproc {parts} (or torchrun --nproc-per-node {parts}), or "
            f"--num-parts {world_size}.")
    if is_partition_dir(cfg.data.dataset):
        from gnnpar.partition.format import PartitionMeta

        meta = PartitionMeta.load(Path(cfg.data.dataset).expanduser())
        if meta.num_parts != world_size:
            raise ConfigError(
                f"the partition has {meta.num_parts} parts but {world_size} processes would "
                "start; gnnpar runs one part per process.", path=cfg.data.dataset,
                field="num_parts",
                fix=f"pass --nproc {meta.num_parts} (or torchrun --nproc-per-node "
                f"{meta.num_parts}), or re-partition with `gnnpar-partition DATASET "
                f"--num-parts {world_size} --out DIR`.")
        check_partition_settings(cfg, meta)
        check_graph_settings(cfg, cfg.data.dataset, meta.types.layout if meta.types else None,
                             meta.feat_dim, meta.num_classes)


def check_partition_settings(cfg: Config, meta: PartitionMeta) -> None:
    """Refuse partition flags that an existing partition directory contradicts.

    A partition directory is trained on as it is: a setting given on the command line
    (one that differs from its default) must be what the directory was made with.
    """
    from gnnpar.config import flag_of
    from gnnpar.partition.config import PartitionConfig

    p, default = cfg.partition, PartitionConfig()
    made = {"partitioner": meta.partitioner.get("method"), "halo_hops": meta.halo_hops,
            "seed": meta.partitioner.get("seed"), "feature_dtype": meta.feature_dtype,
            "balance": tuple(meta.partitioner.get("balance", ())),
            "work_fanouts": tuple(meta.partitioner.get("work_fanouts") or ()) or None,
            "work_batch_size": meta.partitioner.get("work_batch_size")}
    for name, value in made.items():
        given = getattr(p, name)
        if given != getattr(default, name) and given != value:
            flag = flag_of(PartitionConfig, name)
            shown, made_with = (",".join(map(str, v)) if isinstance(v, tuple)
                                else "none recorded" if v is None else v
                                for v in (given, value))
            raise ConfigError(
                f"{flag} {shown}, but the partition directory was made with "
                f"{made_with}; a partition "
                "directory is used as it is.", path=cfg.data.dataset,
                field=f"partition.{name}",
                fix=f"drop {flag}, or re-partition: `gnnpar-partition DATASET --num-parts "
                f"{meta.num_parts} {flag} {shown} --out DIR`.")


def check_typed_settings(cfg: Config, where: str, layout: TypedLayout) -> None:
    """Refuse what typed graphs do not train, and relations the graph does not have.

    Typed graphs train node classification in sample mode with relation-wise GraphSAGE,
    evaluated on sampled neighbourhoods; ``--relation-fanouts`` must name relations of
    ``layout``.
    """
    t = cfg.train
    for bad, fld, fix in ((t.mode != "sample", "train.mode", "pass --mode sample"),
                          (cfg.data.task != "node", "data.task", "pass --task node"),
                          (t.eval == "full", "train.eval",
                           "drop --eval (its auto takes sampled on typed graphs), or pass "
                           "--eval sampled or none"),
                          (cfg.model.name != "sage", "model.name", "pass --model sage")):
        if bad:
            raise ConfigError("typed graphs train node classification on sampled "
                              "minibatches with relation-wise GraphSAGE, evaluated on "
                              "sampled neighbourhoods.", path=where, field=fld,
                              fix=fix + ".")
    if cfg.sample.relation_fanouts is not None:
        from gnnpar.sampling.fanouts import resolve_relation

        for key in cfg.sample.relations():
            try:
                resolve_relation(key, layout)
            except ConfigError as exc:
                raise ConfigError(f"--relation-fanouts: {exc.message}", path=where,
                                  field="sample.relation_fanouts", fix=exc.fix) from None


TYPED_ONLY = (("sample", "relation_fanouts"), ("model", "embed_dim"),
              ("train", "sparse_optimizer"), ("train", "sparse_lr"))
"""Settings that only typed graphs read (the last three: and graphs without features)."""


def check_graph_settings(cfg: Config, where: str, layout: TypedLayout | None,
                         feat_dim: int, num_classes: int = 0) -> None:
    """The checks of a typed graph (``layout``) or of one without features, and the size.

    A graph without features learns a row per node, in sample mode (node
    classification); a graph with features refuses the embedding settings.  The model
    that ``--hidden`` and ``--layers`` make on this graph must fit in memory.
    """
    check_model_size(cfg, where, layout, feat_dim, num_classes)
    if layout is not None:
        check_typed_settings(cfg, where, layout)
        return
    if feat_dim == 0:
        for bad, fld, fix in ((cfg.train.mode != "sample", "train.mode", "--mode sample"),
                              (cfg.data.task != "node", "data.task", "--task node")):
            if bad:
                raise ConfigError("the graph has no node features: its nodes learn an "
                                  "embedding each, which trains node classification in "
                                  "sample mode.", path=where, field=fld,
                                  fix=f"pass {fix}, or give the graph features "
                                  "(--features FILE).")
        given = [(s, name) for s, name in TYPED_ONLY if (s, name) == ("sample",
                                                                       "relation_fanouts")]
    else:
        given = list(TYPED_ONLY)
    from gnnpar.config import flag_of, sections

    secs = sections(Config)
    set_ = [(f"{s}.{name}", flag_of(secs[s], name)) for s, name in given
            if getattr(getattr(cfg, s), name) != getattr(type(getattr(cfg, s))(), name)]
    if set_:
        flags = ", ".join(flag for _, flag in set_)
        raise ConfigError(f"{flags} set, but this graph has one node type"
                          f"{' and features' if feat_dim else ''}: they apply to typed graphs "
                          "(the embedding settings also to graphs without features).",
                          path=where, field=set_[0][0], fix=f"drop {flags}.")


def check_model_size(cfg: Config, where: str, layout: TypedLayout | None, feat_dim: int,
                     num_classes: int) -> None:
    """Refuse a ``--hidden`` whose model would not fit in this machine's memory.

    Counts the weight matrices of a GraphSAGE-like model (two per layer and relation):
    ``F x H``, ``(L - 2)`` of ``H x H`` and ``H x C``, at :data:`PARAMETER_BYTES` each.
    """
    from gnnpar.sizes import PARAMETER_BYTES, check_fits

    m = cfg.model
    width = max([feat_dim, *(layout.feat_dims if layout else ())]) or m.embedding_width()
    out = m.hidden if cfg.data.task == "link" else max(num_classes, 1)
    relations = len(layout.edge_types) if layout else 1
    per_relation = (width * m.hidden + max(m.layers - 2, 0) * m.hidden ** 2
                    + m.hidden * out if m.layers > 1 else width * out)
    params = 2 * relations * per_relation
    check_fits(params, PARAMETER_BYTES, path=where, field="model.hidden",
               what=f"--hidden {m.hidden} with {m.layers} layers makes about {params:,} "
               "parameters, which", fix="pass a smaller --hidden (or fewer --layers).")


def check_device(cfg: Config, local_world_size: int) -> None:
    """Refuse a device this machine cannot give each of its processes (before any worker).

    On a CPU-only build of torch (``+cpu``, known from the installed version) a CUDA
    device is refused without importing torch, so the refusal answers at once; elsewhere,
    or once torch is imported anyway, :func:`gnnpar.distributed.check_device` decides
    (GPUs seen, one per process).
    """
    import sys
    from importlib.metadata import PackageNotFoundError, version

    device = cfg.run.device
    try:
        installed = version("torch")
    except PackageNotFoundError:  # pragma: no cover - torch built in place
        installed = ""
    if installed.endswith("+cpu") and "torch" not in sys.modules:
        if device is not None and device.startswith("cuda"):
            raise ConfigError(f"--device {device}, but torch {installed} (a CPU-only build) "
                              "sees no GPU here.", field="run.device",
                              fix="pass --device cpu (or drop --device), or install a CUDA "
                              "build of torch on a machine with a GPU.")
        return
    from gnnpar.distributed import check_device as check  # imports torch

    check(device, local_world_size)


def check_rejoined(out: Path, world_size: int, cfg: Config) -> None:
    """Refuse a restarted run that has fewer ranks than its checkpoint had.

    Under torchrun with ``--nnodes MIN:MAX``, a restart goes on with the machines that
    rejoined; one part per rank, so the parts of a machine that did not come back have
    no rank.

    Raises:
        DistributedError: Naming the parts without a rank and the command that
            partitions the graph for the ranks that remain.
    """
    from gnnpar.train.checkpoint import read_state  # imports torch

    try:
        saved = int(read_state(out / CHECKPOINT_DIR)["world_size"])
    except ConfigError:
        return  # no checkpoint yet: the run starts over at the new size, or is refused
    if saved <= world_size:
        return
    missing = list(range(world_size, saved))
    parts = (f"part {missing[0]}" if len(missing) == 1
             else f"parts {missing[0]}-{missing[-1]}")
    if is_partition_dir(cfg.data.dataset):
        command = (f"gnnpar-partition DATASET --num-parts {world_size} --out DIR` (DATASET: "
                   f"the graph {cfg.data.dataset} was made from)")
    else:
        command = partition_command(cfg, world_size, partition_cache_dir(cfg, world_size)) + "`"
    raise DistributedError(
        f"the run was restarted with {world_size} of its {saved} ranks: {parts} of "
        f"{saved} {'has' if len(missing) == 1 else 'have'} no rank (their machine left "
        "and did not rejoin within torchrun's rendezvous), and gnnpar trains one part "
        f"per rank.", path=str(out), field="world_size",
        fix=f"bring back a machine with {saved - world_size} rank"
        f"{'s' if saved - world_size > 1 else ''} (the run continues from its checkpoint), "
        f"or partition the graph for {world_size} rank{'s' if world_size > 1 else ''} "
        f"(`{command} and start a new run on it.")


def check_before_start(cfg: Config, world_size: int, local_world_size: int,
                       hold: contextlib.ExitStack | None = None,
                       restart: bool = False) -> Path:
    """Every check that needs no data, then the run directory (see the module docstring).

    Args:
        cfg: The run's settings.
        world_size: Processes of the run.
        local_world_size: Processes on this machine.
        hold: Keeps the run directory's lock until the run ends.
        restart: torchrun restarted the workers: the run in ``--out`` continues (from its
            checkpoint, with the same settings and as many ranks).

    Returns:
        The run directory (created).
    """
    if restart or os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") not in ("", "0"):
        from gnnpar.train.elastic import max_restarts  # imports torch

        if max_restarts() and cfg.run.out is None:
            raise ConfigError("a run that torchrun restarts must name its run directory, "
                              "so that the restarted workers find it.", field="run.out",
                              fix="pass --out DIR.")
        if restart and cfg.run.out is not None:
            check_rejoined(Path(cfg.run.out), world_size, cfg)
    check_world_size(cfg, world_size)
    check_device(cfg, local_world_size)
    run = cfg.run
    kind = "link" if cfg.data.task == "link" else cfg.train.mode
    out = prepare_run_dir(run.out, name=f"{dataset_slug(cfg.data.dataset)}-{kind}",
                          resume=run.resume, overwrite=run.overwrite, hold=hold,
                          restart=restart)
    if run.resume or (restart and (out / CHECKPOINT_DIR / STATE_FILE).is_file()):
        check_resume(out, cfg)
    return out


def partition_command(cfg: Config, num_parts: int, out: Path) -> str:
    """The ``gnnpar-partition`` command that makes the partition ``cfg`` trains on."""
    from gnnpar.config import command_flags

    argv = ["gnnpar-partition", *command_flags(cfg.data),
            *command_flags(partition_settings(cfg), skip=("num_parts",)),
            "--num-parts", str(num_parts), "--out", str(out)]
    if not cfg.data.dataset or argv[1].startswith("--"):
        argv.insert(1, cfg.data.dataset)
    return shlex.join(argv)


def resolve_partition(cfg: Config, world_size: int, progress: bool = False,
                      make: bool = True, phases: dict[str, float] | None = None) -> Path:
    """The partition directory to train on, partitioning a dataset spec when needed.

    Call it in one process (the launcher): it may partition.

    Args:
        cfg: The run's settings.
        world_size: Processes, one part each.
        progress: Show the partitioner's progress bars.
        make: Partition a dataset spec whose partition is not cached yet; ``False``
            (under ``torchrun``, where every rank has started) refuses instead.
        phases: Gets the seconds of ``load`` and ``partition`` when they run (each also
            announced and timed in the log).

    Returns:
        ``cfg.data.dataset`` when it is a partition directory, else the cache directory
        of the spec's partition into ``world_size`` parts.

    Raises:
        ConfigError: ``make`` is ``False`` and the partition is not cached: the message
            gives the ``gnnpar-partition`` command that makes it.
    """
    if is_partition_dir(cfg.data.dataset):
        return Path(cfg.data.dataset).expanduser()
    out = partition_cache_dir(cfg, world_size)
    if not make and not (out / META_FILE).is_file():
        raise ConfigError(
            f"{cfg.data.dataset} has no partition into {world_size} parts yet, and under "
            "torchrun no rank partitions while the others wait.", field="data.dataset",
            fix=f"partition it first: `{partition_command(cfg, world_size, out)}`, then "
            "run this command again (or pass that --out as the dataset); gnnpar-train "
            f"--nproc {world_size} partitions before it starts the workers.")
    from gnnpar.artifacts.lock import fill_cache

    def waiting(who: str) -> None:
        log.info("waiting for %s: it partitions %s into the same cache %s", who,
                 cfg.data.dataset, out)

    try:  # before the dataset is read: a --root that cannot hold the partition
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"the partition cache {out.parent} cannot be created there "
                          f"({exc.strerror or exc}).", path=cfg.data.root, field="data.root",
                          fix="pass --root DIR under a writable directory (every part of "
                          "the path a directory).") from None
    if not fill_cache(out, (out / META_FILE).is_file,
                      lambda: _partition_spec(cfg, world_size, out, progress, phases), waiting):
        from gnnpar.partition.format import PartitionMeta

        meta = PartitionMeta.load(out)  # cached, by an earlier or a concurrent run
        check_graph_settings(cfg, cfg.data.dataset, meta.types.layout if meta.types else None,
                             meta.feat_dim, meta.num_classes)
    return out


def _partition_spec(cfg: Config, world_size: int, out: Path, progress: bool,
                    phases: dict[str, float] | None) -> None:
    """Load ``cfg.data``'s dataset spec and partition it into the cache directory ``out``.

    :func:`~gnnpar.partition.writer.partition_dataset`, with the dataset checked against
    the settings first; each phase is logged and timed into ``phases``.
    """
    from gnnpar.datasets.graph import class_count
    from gnnpar.datasets.typed import TypedGraphDataset
    from gnnpar.partition.stages import StageMeter
    from gnnpar.partition.writer import partition_dataset

    meter = StageMeter()
    started = 0.0  # when the partitioning starts, once the checks passed

    def check(dataset: GraphDataset | TypedGraphDataset) -> None:
        nonlocal started
        took = meter.stages[-1].seconds  # the load
        log.info("loaded %s in %.1f s: %s nodes, %s edges", cfg.data.dataset, took,
                 f"{dataset.num_nodes:,}" if isinstance(dataset.num_nodes, int)
                 else f"{sum(dataset.num_nodes.values()):,}", f"{dataset.num_edges:,}")
        if phases is not None:
            phases["load"] = took
        if isinstance(dataset, TypedGraphDataset):
            check_graph_settings(cfg, cfg.data.dataset, dataset.layout(), 0,
                                 class_count(dataset))
        else:
            check_graph_settings(cfg, cfg.data.dataset, None, dataset.feat_dim,
                                 class_count(dataset))
        log.info("partitioning into %d parts (%s) ...", world_size, cfg.partition.partitioner)
        started = time.time()

    log.info("loading %s ...", cfg.data.dataset)
    partition_dataset(cfg.data, out, replace(partition_settings(cfg), num_parts=world_size),
                      check=check, need_labels=True, progress=progress, meter=meter)
    took = time.time() - started
    log.info("partitioned in %.1f s: %s", took, out)
    if phases is not None:
        phases["partition"] = took


STARTUP_READ_RATE = 25e6
"""Bytes per second that the default start-up timeout allows each rank to verify at: far
below a local disk (docs/startup.md), for many ranks reading one shared file system."""


def startup_timeout(cfg: Config, part_dir: str | Path) -> float:
    """Seconds every rank may take to load and verify its part before the first collective.

    ``--startup-timeout-s`` when given, else ``--timeout-s`` plus the largest part's bytes
    at :data:`STARTUP_READ_RATE` (``meta.json`` unreadable: ``--timeout-s``; the load
    names the problem).
    """
    from gnnpar.partition.format import PartitionMeta, part_bytes

    if cfg.run.startup_timeout_s is not None:
        return float(cfg.run.startup_timeout_s)
    try:
        largest = max(part_bytes(part_dir, PartitionMeta.load(part_dir)))
    except PartitionError:
        largest = 0
    return float(cfg.run.timeout_s + largest / STARTUP_READ_RATE)
