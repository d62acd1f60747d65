"""``gnnpar-train``'s configuration: one nested dataclass for every mode.

=========== ==================================================================
section     what it sets
=========== ==================================================================
``data``    the graph (:class:`~gnnpar.datasets.config.DataConfig`)
``partition`` how a dataset spec is split (:class:`~gnnpar.partition.config.PartitionConfig`)
``model``   the PyG model
``train``   the mode (``sample`` or ``full``), epochs, optimiser, seed
``sample``  minibatch mode: fan-outs, batch sizes, feature cache, GCN normalisation
``full``    full-graph mode: boundary-node sampling, stale halos
``link``    link prediction (``--task link``): decoder, negatives, target exclusion
``run``     where and how it runs: run directory, resume, checkpoints, processes, device
=========== ==================================================================

Every field is one flag of ``gnnpar-train`` (its docstring is the help text) and one key
of a ``--config`` TOML/JSON file; see :mod:`gnnpar.config`.  :meth:`Config.validate`
checks every value before any work starts, naming the field, its flag and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from gnnpar.config import (
    check_choice,
    check_int,
    check_number,
    config_error,
    flag_of,
    option,
    resolve_task_defaults,
    sections,
    task_default,
    to_dict,
)
from gnnpar.datasets.config import DataConfig
from gnnpar.errors import ConfigError
from gnnpar.partition.config import PartitionConfig
from gnnpar.train.sync import LocalSGD, parse_groups, parse_sync

MODEL_NAMES = ("sage", "gcn", "gat")
SPARSE_OPTIMIZERS = ("adam", "adagrad")
MODES = ("sample", "full")
GCN_NORMS = ("global", "sampled")
PRECISIONS = ("fp32", "bf16")
EVALS = ("auto", "full", "sampled", "none")
AUTO_EVAL = {False: "full", True: "sampled"}
"""What ``--eval auto`` becomes on a homogeneous graph (``False``) and a typed one."""
SEED_SPLITS = ("even", "owned")
DECODERS = ("dot", "mlp")
EXCLUDES = ("reverse", "self", "none")
METRICS = ("csv", "tensorboard")


@dataclass
class ModelConfig:
    """Which PyG model to train (torch_geometric.nn.models)."""

    name: str = field(default="sage", metadata={"flag": "model"})
    """sage (GraphSAGE, mean), gcn or gat."""

    hidden: int = 128
    """Hidden width."""

    layers: int = 2
    """Message-passing layers (in sample mode, one fan-out per layer)."""

    dropout: float = task_default(0.5, link=0.0)
    """Dropout probability after each hidden layer."""

    heads: int = 4
    """Attention heads (gat only); must divide --hidden."""

    embed_dim: int = 0
    """Width of the learnable embeddings, sharded by owner, of featureless nodes (of a
    typed graph's featureless types, or of every node of a graph without features;
    0: --hidden)."""

    def validate(self) -> ModelConfig:
        """Check every value; return ``self`` or raise :class:`ConfigError`."""
        check_choice(ModelConfig, "model.name", self.name, MODEL_NAMES)
        for name in ("hidden", "layers", "heads"):
            check_int(ModelConfig, f"model.{name}", getattr(self, name), 1)
        check_int(ModelConfig, "model.embed_dim", self.embed_dim, 0)
        check_number(ModelConfig, "model.dropout", self.dropout, 0.0)
        if self.dropout >= 1.0:
            raise config_error(ModelConfig, "model.dropout", self.dropout,
                               "need 0 <= dropout < 1", "0.5")
        if self.name == "gat" and self.hidden % self.heads:
            raise config_error(ModelConfig, "model.hidden", self.hidden,
                               f"GAT needs hidden divisible by heads={self.heads}",
                               str(self.heads * max(1, self.hidden // self.heads)))
        return self

    def embedding_width(self) -> int:
        """Width of the learnable rows of featureless nodes (``embed_dim``, else ``hidden``)."""
        return self.embed_dim or self.hidden


@dataclass
class TrainConfig:
    """How to train: the mode, the optimiser, the epochs."""

    mode: str = "sample"
    """sample (minibatches of sampled neighbourhoods, DistDGL-style) or full (the whole
    graph every step, exact halo exchange before each layer)."""

    epochs: int = task_default(10, full=100)
    """Passes over the training nodes (full mode: one gradient step each, so it takes
    more of them)."""

    lr: float = task_default(0.005, full=0.01, link=0.002)
    """Adam learning rate."""

    weight_decay: float = 0.0
    """Adam weight decay."""

    sparse_optimizer: str = "adam"
    """Optimiser of the learnable embeddings of featureless nodes, adam (torch's
    SparseAdam) or adagrad; only the rows a step touched are updated."""

    sparse_lr: float = 0.01
    """Learning rate of the learnable embeddings."""

    seed: int = 0
    """Seed of the initial weights, the shuffle, the sampler and dropout."""

    eval_every: int = 1
    """Validation and test accuracy every this many epochs (and after the last):
    sampled neighbourhoods in sample mode, exact in full mode."""

    early_stop: int = 0
    """Stop when this many evaluations in a row (--eval-every) have not beaten the best
    validation figure (node: accuracy; link: MRR); 0: train every --epochs. The best
    evaluation is the run's headline either way (OUT/best holds its weights)."""

    min_epochs: int = 0
    """--early-stop never ends the run before this many epochs."""

    eval: str = "auto"
    """The run's final accuracies: full (exact full-neighbour inference on the whole
    graph after the last epoch, layer by layer), sampled (the last epoch's sampled
    validation and test accuracy; sample mode), none (no final evaluation) or auto (full,
    but sampled on a typed graph, the one evaluation typed graphs have; the run records
    the one it took)."""

    eval_budget_mb: float = 64.0
    """Full-neighbour inference: MiB per chunk of destination nodes for its per-edge and
    per-row tensors (smaller: less memory, more chunks; the same result)."""

    precision: str = "fp32"
    """fp32, or bf16. Sample mode: bf16 compute (autocast) only where the device has it
    natively (CUDA; CPUs with AVX512-BF16 or AMX); elsewhere (an AVX2 CPU emulates bf16
    at several times fp32's cost) the model computes in fp32 and bf16 stays a storage
    and transfer dtype: store the features in bf16 (gnnpar-partition --feature-dtype
    bf16) for half the feature bytes, upcast once they arrive. Full mode: activations
    and halo rows in bf16 on every device. Weights, gradients and Adam stay fp32."""

    sync: str = "every:1"
    """Sample mode: every:1 all-reduces the gradients every step (synchronous);
    every:H takes H local steps on each rank, then averages the parameters (local SGD,
    about H times fewer bytes), and at every epoch end and checkpoint."""

    sync_warmup: int = 0
    """Local SGD: synchronous steps before the first local one (post-local SGD)."""

    sync_optimizer: bool = False
    """Local SGD: average the optimizer's state (Adam's moments) with the parameters."""

    sync_groups: str | None = None
    """Hierarchical local SGD, G:h: between the global averages, also average within
    groups of G consecutive ranks (one machine's GPUs) every h steps."""

    def validate(self) -> TrainConfig:
        """Check every value; return ``self`` or raise :class:`ConfigError`."""
        check_choice(TrainConfig, "train.mode", self.mode, MODES)
        check_choice(TrainConfig, "train.precision", self.precision, PRECISIONS)
        check_choice(TrainConfig, "train.eval", self.eval, EVALS)
        if self.eval == "sampled" and self.mode == "full":
            raise ConfigError("--eval sampled reports the sampled evaluation, and full mode "
                              "evaluates on the whole graph.", field="train.eval",
                              fix="pass --eval full or --eval none, or --mode sample.")
        check_number(TrainConfig, "train.eval_budget_mb", self.eval_budget_mb, 0.0,
                     strict=True)
        for name in ("epochs", "eval_every"):
            check_int(TrainConfig, f"train.{name}", getattr(self, name), 1)
        check_int(TrainConfig, "train.early_stop", self.early_stop, 0)
        check_int(TrainConfig, "train.min_epochs", self.min_epochs, 0)
        check_number(TrainConfig, "train.lr", self.lr, 0.0, strict=True)
        check_number(TrainConfig, "train.weight_decay", self.weight_decay, 0.0)
        check_choice(TrainConfig, "train.sparse_optimizer", self.sparse_optimizer,
                     SPARSE_OPTIMIZERS)
        check_number(TrainConfig, "train.sparse_lr", self.sparse_lr, 0.0, strict=True)
        check_int(TrainConfig, "train.seed", self.seed, 0)
        check_int(TrainConfig, "train.sync_warmup", self.sync_warmup, 0)
        period = parse_sync(self.sync)
        parse_groups(self.sync_groups, period)
        if period > 1 and self.mode == "full":
            raise ConfigError("local SGD averages minibatch replicas; full mode takes one "
                              "exact step per epoch.", field="train.sync",
                              fix="pass --mode sample, or drop --sync.")
        return self

    def local_sgd(self) -> LocalSGD:
        """The synchronisation schedule of ``sync``, ``sync_warmup``, ``sync_optimizer``."""
        period = parse_sync(self.sync)
        return LocalSGD(period, self.sync_warmup, self.sync_optimizer,
                        *parse_groups(self.sync_groups, period))


@dataclass
class SampleConfig:
    """Minibatch mode (--mode sample): distributed neighbour sampling."""

    fanouts: tuple[int, ...] = (10, 10)
    """Neighbours sampled per hop, seeds' hop first (e.g. 15,10); one per layer (typed
    graphs: per relation, for every relation --relation-fanouts does not name)."""

    relation_fanouts: str | None = None
    """Typed graphs: fan-outs of some relations, REL=F1,F2;REL=... with REL as
    src__rel__dst or, when unique, the relation's name (0 skips a relation at a hop)."""

    batch_size: int = task_default(1024, link=256)
    """Seeds per step on each rank: nodes (--task node), positive edges (--task link)."""

    eval_batch_size: int = 4096
    """Seed nodes per step on each rank for the sampled validation and test accuracy."""

    cache_mb: float = 0.0
    """Per-rank budget of the cache of remote feature rows, in MiB (0: no cache)."""

    prefetch: bool = True
    """Sample the next batch and send its feature requests before the current one
    trains, so its rows travel meanwhile (same thread, same process group)."""

    peer_reads: bool = True
    """CPU ranks on one machine read each other's parts (feature rows, labels, adjacency)
    from the partition's files (the page cache) instead of exchanging them: the same
    batches; --no-peer-reads exchanges everything remote, as between machines (node
    task)."""

    seed_split: str = "even"
    """How training seeds are shared: even (a rank with over 5% more than the mean
    share hands the excess to ranks with fewer, once, labels included) or owned (each
    rank its own seeds, however unbalanced)."""

    gcn_norm: str = "global"
    """GCN normalisation on sampled batches: global (the graph's degrees, sampled
    neighbours scaled by degree / sampled, the same as full-neighbour inference) or
    sampled (PyG's GCNConv on the sampled subgraph's own degrees)."""

    def validate(self, model: ModelConfig) -> SampleConfig:
        """Check every value against the model; return ``self`` or raise."""
        fan = self.fanouts
        if not isinstance(fan, tuple) or not fan or any(
                isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in fan):
            raise config_error(SampleConfig, "sample.fanouts", fan,
                               "every fan-out must be an int >= 1", "15,10")
        if len(fan) != model.layers:
            raise ConfigError(
                f"{len(fan)} fan-outs {list(fan)} for {model.layers} layers; each layer "
                "aggregates one sampled hop.", field="sample.fanouts",
                fix=f"give one fan-out per layer (--fanouts with {model.layers} values) or "
                f"--layers {len(fan)}.")
        if self.relation_fanouts is not None:
            for rel, hops in self.relations().items():
                if len(hops) != model.layers:
                    raise config_error(SampleConfig, "sample.relation_fanouts",
                                       self.relation_fanouts, f"{rel} has {len(hops)} "
                                       f"fan-outs for {model.layers} layers",
                                       f"{rel}={','.join(['10'] * model.layers)}")
        for name in ("batch_size", "eval_batch_size"):
            check_int(SampleConfig, f"sample.{name}", getattr(self, name), 1)
        check_number(SampleConfig, "sample.cache_mb", self.cache_mb, 0.0)
        check_choice(SampleConfig, "sample.gcn_norm", self.gcn_norm, GCN_NORMS)
        check_choice(SampleConfig, "sample.seed_split", self.seed_split, SEED_SPLITS)
        return self


    def relations(self) -> dict[str, list[int]]:
        """``relation_fanouts`` parsed: ``{REL: [fan-out per hop]}`` (raises on bad syntax)."""
        out: dict[str, list[int]] = {}
        for item in (self.relation_fanouts or "").split(";"):
            rel, eq, hops = item.strip().partition("=")
            try:
                values = [int(v) for v in hops.split(",")] if eq and rel.strip() else []
            except ValueError:
                values = []
            if not values or min(values) < 0 or rel.strip() in out:
                raise config_error(SampleConfig, "sample.relation_fanouts",
                                   self.relation_fanouts, "need REL=F1,F2;REL=... with ints "
                                   ">= 0, each relation once", "cites=5,5;writes=10,5")
            out[rel.strip()] = values
        return out


@dataclass
class FullConfig:
    """Full-graph mode (--mode full): halo exchange and its communication reducers."""

    boundary_p: float | None = None
    """BNS-GCN: send each boundary row with this probability per epoch, scaled by 1/p
    (default: exact)."""

    stale: bool = False
    """PipeGCN: use the previous epoch's halo rows and gradients, overlapping the
    exchange with compute (the first epoch is exact)."""

    grid: str | None = None
    """3D parallelism (Plexus): X,Y,Z ranks of the process grid that every layer's
    adjacency, features and weights are split over, X*Y*Z = the number of processes
    (default: 1D, each rank its part's rows with halo exchange)."""

    def validate(self) -> FullConfig:
        """Check every value; return ``self`` or raise :class:`ConfigError`."""
        if self.grid is not None:
            from gnnpar.nn.grid import parse_grid  # torch-free --help: imported on use

            parse_grid(self.grid)
            if self.boundary_p is not None or self.stale:
                raise ConfigError("--grid runs exact layers, without boundary sampling or "
                                  "stale halos.", field="full.grid",
                                  fix="drop --boundary-p and --stale, or drop --grid.")
        if self.boundary_p is not None:
            check_number(FullConfig, "full.boundary_p", self.boundary_p, 0.0, strict=True,
                         high=1.0)
            if self.stale:
                raise ConfigError("boundary sampling and stale halos cannot be combined.",
                                  field="full.boundary_p",
                                  fix="pass one of --boundary-p and --stale.")
        return self


@dataclass
class LinkConfig:
    """Link prediction (--task link): the decoder, the negatives, the hidden targets."""

    decoder: str = "dot"
    """How a pair of embeddings is scored: dot (their inner product) or mlp (an MLP on
    their elementwise product, as OGB's link baselines)."""

    num_neg: int = 1
    """Random negative pairs per positive in each training batch (binary, uniform over
    all nodes)."""

    strict: bool = field(default=False, metadata={"flag": "strict-negatives"})
    """Redraw negatives that are edges of the graph (one exchange per round)."""

    exclude: str = "reverse"
    """Message-passing edges a batch hides: its target edges and their reverses
    (reverse, for undirected graphs), its targets (self) or none."""

    eval_chunk: int = 1024
    """Evaluation: positives scored per exchange of embeddings."""

    def validate(self) -> LinkConfig:
        """Check every value; return ``self`` or raise :class:`ConfigError`."""
        check_choice(LinkConfig, "link.decoder", self.decoder, DECODERS)
        check_choice(LinkConfig, "link.exclude", self.exclude, EXCLUDES)
        check_int(LinkConfig, "link.num_neg", self.num_neg, 1)
        check_int(LinkConfig, "link.eval_chunk", self.eval_chunk, 1)
        return self


@dataclass
class RunConfig:
    """Where and how the run goes: run directory, resume, checkpoints, processes."""

    out: str | None = None
    """Run directory: record.json, config.json, checkpoint/ (default: a new
    runs/DATASET-MODE[-N], or runs/DATASET-link[-N] with --task link)."""

    resume: bool = False
    """Continue the run in --out from its newest checkpoint (same settings required)."""

    overwrite: bool = False
    """Replace the run in --out (its record.json, config.json and checkpoint/; kept aside
    until the new run's first checkpoint, and put back if the new run fails first)."""

    checkpoint_every: int = 1
    """Checkpoint every this many epochs (and after the last)."""

    save_best: bool = True
    """Keep the weights of the best-valid evaluation in OUT/best (a checkpoint written
    each time the validation figure improves; gnnpar-export --best and gnnpar-predict
    --best read it)."""

    checkpoint_steps: int = 0
    """Sample mode: also checkpoint every this many steps within an epoch (0: at epoch
    ends only)."""

    checkpoint_every_s: float | None = None
    """Also checkpoint every this many seconds of training, so that a lost rank costs at
    most about this much work (default: 600 for a run restarted on failure, by
    --max-restarts or torchrun --max-restarts, else none; 0: never by time). Inside an
    epoch in sample mode; at epoch ends in full mode and with local SGD."""

    max_restarts: int = 0
    """When a worker dies or hangs, restart every worker from the run's newest
    checkpoint, up to this many times (the run record notes each restart). Under
    torchrun, pass torchrun --max-restarts instead."""

    nproc: int | None = None
    """Launch this many worker processes on this machine (default: this process is one
    worker of torchrun, or the only one)."""

    device: str | None = None
    """cpu or cuda (default: the local rank's GPU when torch sees one, else cpu)."""

    threads: int | None = None
    """Torch threads per process (default: this machine's cores / the ranks on it, under
    --nproc and torchrun alike)."""

    timeout_s: float = 300.0
    """Collective timeout in seconds: a peer silent this long (dead or hung) fails the
    run, naming the rank (a hung rank ends the run within 1.5 x this)."""

    startup_timeout_s: float | None = None
    """Longest wait, before the first collective, for every rank to load and verify its
    part (default: --timeout-s plus the largest part's bytes at 25 MB/s; docs/startup.md)."""

    progress: bool = True
    """Show progress bars (rank 0, on a terminal)."""

    log_every: int = 0
    """Log a line (epoch, step, loss, throughput) every this many training steps (0:
    about every 10 s of training, when no progress bar is shown)."""

    metrics: str | None = None
    """Write scalars while training (rank 0): csv (OUT/metrics.csv) or tensorboard
    (OUT/tensorboard, needs pip install 'gnnpar[tensorboard]'); per step the loss, per
    epoch the record's figures."""

    save_predictions: bool = False
    """After the final exact full-neighbour inference, write every node's logits and
    class into OUT/predictions (a .npy shard per rank and index.json; read them in
    dataset order with gnnpar.load_predictions(OUT)); typed graphs: the target type's."""

    save_embeddings: int | None = option(None, const=0, metavar="LAYER")
    """Also write every node's embeddings into OUT/predictions: the output of layer LAYER
    (1..--layers; without LAYER: the last hidden layer, or the encoder's output with
    --task link, whose pairs score from them); typed graphs: the target type's."""

    plan: bool = False
    """Print the planner's estimates (memory per rank, bytes per epoch, step cost of
    sampled, full-graph 1D and 3D training on this partition) and its choice; train
    nothing."""

    plan_memory_gb: float | None = None
    """--plan: memory budget per rank in GB (default: none)."""

    plan_speeds: str | None = None
    """--plan: relative speed of each rank, comma-separated (default: all equal)."""

    def validate(self) -> RunConfig:
        """Check every value; return ``self`` or raise :class:`ConfigError`."""
        if self.out is not None and not self.out:
            raise config_error(RunConfig, "run.out", self.out, "the run directory is empty",
                               "runs/mine")
        if self.resume and self.overwrite:
            raise ConfigError("--resume continues the run in --out, --overwrite replaces it.",
                              field="run.resume", fix="pass one of them.")
        if self.resume and self.out is None:
            raise ConfigError("--resume needs the run directory to continue.",
                              field="run.out", fix="pass --out RUN_DIR --resume.")
        check_int(RunConfig, "run.checkpoint_every", self.checkpoint_every, 1)
        check_int(RunConfig, "run.checkpoint_steps", self.checkpoint_steps, 0)
        if self.checkpoint_every_s is not None:
            check_number(RunConfig, "run.checkpoint_every_s", self.checkpoint_every_s, 0.0)
        check_int(RunConfig, "run.max_restarts", self.max_restarts, 0)
        for name in ("nproc", "threads"):
            if getattr(self, name) is not None:
                check_int(RunConfig, f"run.{name}", getattr(self, name), 1)
        if self.device is not None and self.device.split(":")[0] not in ("cpu", "cuda"):
            raise config_error(RunConfig, "run.device", self.device, "need cpu or cuda", "cuda")
        check_number(RunConfig, "run.timeout_s", self.timeout_s, 0.0, strict=True)
        if self.startup_timeout_s is not None:
            check_number(RunConfig, "run.startup_timeout_s", self.startup_timeout_s, 0.0,
                         strict=True)
        check_int(RunConfig, "run.log_every", self.log_every, 0)
        if self.metrics is not None:
            check_choice(RunConfig, "run.metrics", self.metrics, METRICS)
        if self.save_embeddings is not None:
            check_int(RunConfig, "run.save_embeddings", self.save_embeddings, 0)
        if self.plan_memory_gb is not None:
            check_number(RunConfig, "run.plan_memory_gb", self.plan_memory_gb, 0.0, strict=True)
        self.speeds()
        return self

    def speeds(self) -> list[float] | None:
        """``plan_speeds`` as numbers (``None`` when not given)."""
        if self.plan_speeds is None:
            return None
        try:
            speeds = [float(v) for v in self.plan_speeds.split(",")]
        except ValueError:
            speeds = []
        if not speeds or min(speeds) <= 0:
            raise config_error(RunConfig, "run.plan_speeds", self.plan_speeds,
                               "need positive numbers, one per rank", "1,1,0.5,0.5")
        return speeds


@dataclass
class Config:
    """A whole training run.

    Example::

        from gnnpar.train.config import RunConfig, SampleConfig
        cfg = gnnpar.Config(sample=SampleConfig(fanouts=(15, 10)),
                            run=RunConfig(out="runs/mine")).validate()
    """

    data: DataConfig = field(default_factory=DataConfig)
    """The graph."""

    partition: PartitionConfig = field(default_factory=PartitionConfig)
    """How a dataset spec is partitioned."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """The model."""

    train: TrainConfig = field(default_factory=TrainConfig)
    """The mode and the optimiser."""

    sample: SampleConfig = field(default_factory=SampleConfig)
    """Minibatch mode."""

    full: FullConfig = field(default_factory=FullConfig)
    """Full-graph mode."""

    link: LinkConfig = field(default_factory=LinkConfig)
    """Link prediction."""

    run: RunConfig = field(default_factory=RunConfig)
    """Run directory, processes, device."""

    def validate(self) -> Config:
        """Check every value and their combinations; return the configuration to run.

        The configuration returned is a copy with the defaults of the run's task and mode
        in place (:func:`~gnnpar.config.task_default`: e.g. ``model.dropout``); raises
        :class:`ConfigError` on the first bad value.  A setting of the other mode's section
        that differs from its default is refused rather than silently ignored.
        """
        return resolve_task_defaults(self, self.data.task, self.train.mode)._check()

    def _check(self) -> Config:
        self.data.validate()
        self.partition.validate()
        self.model.validate()
        self.train.validate()
        self.run.validate()
        if self.train.mode == "sample":
            self.sample.validate(self.model)
        else:
            self.full.validate()
        self.link.validate()
        self._check_task()
        self._check_outputs()
        if self.full.grid is not None:
            self._check_grid()
        other = "full" if self.train.mode == "sample" else "sample"
        section = getattr(self, other)
        given = [f"{other}.{f.name}" for f in fields(section)
                 if getattr(section, f.name) != getattr(type(section)(), f.name)]
        if self.train.mode == "full" and self.run.checkpoint_steps:
            given.append("run.checkpoint_steps")
        if given:
            secs = sections(Config)
            flags = ", ".join(flag_of(secs[p.split(".")[0]], p.split(".")[1]) for p in given)
            raise ConfigError(f"{flags} set, but they apply to --mode {other} and this run "
                              f"is --mode {self.train.mode}.", field=given[0],
                              fix=f"drop {flags}, or pass --mode {other}.")
        return self

    def _check_grid(self) -> None:
        """Refuse what the 3D layers do not run, and a grid that does not fit ``--nproc``."""
        from gnnpar.nn.grid import parse_grid  # torch-free --help
        from gnnpar.parallel_dims import check_grid

        if self.model.name not in ("gcn", "sage"):
            raise ConfigError(f"--grid runs GCN and GraphSAGE layers, not {self.model.name}.",
                              field="model.name", fix="pass --model gcn or --model sage.")
        if self.train.precision != "fp32" or self.train.eval == "sampled":
            raise ConfigError("--grid trains and evaluates in fp32, exactly.",
                              field="train.precision" if self.train.precision != "fp32"
                              else "train.eval",
                              fix="pass --precision fp32 and --eval full (or none) with --grid.")
        if self.run.nproc is not None and self.full.grid is not None:
            check_grid(parse_grid(self.full.grid), self.run.nproc)

    def _check_outputs(self) -> None:
        """Refuse predictions and embeddings that the run cannot write."""
        run, layer = self.run, self.run.save_embeddings
        if layer is not None and layer > self.model.layers:
            raise config_error(RunConfig, "run.save_embeddings", layer,
                               f"need a layer in 1..{self.model.layers} (--layers)",
                               str(max(1, self.model.layers - 1)))
        if run.save_predictions and self.data.task == "link":
            raise ConfigError("link prediction has no class per node: its pairs score from "
                              "the encoder's node embeddings.", field="run.save_predictions",
                              fix="pass --save-embeddings instead of --save-predictions.")
        if (run.save_predictions or layer is not None) and self.full.grid is not None:
            raise ConfigError("--grid runs its layers on a 3D process grid, which writes no "
                              "per-node rows.", field="run.save_predictions",
                              fix="drop --save-predictions / --save-embeddings, and after "
                              "training run `gnnpar-predict OUT DATASET --out DIR` (it reads "
                              "the checkpoint).")

    def _check_task(self) -> None:
        """Refuse link settings on a node task, and link prediction in full mode."""
        if self.data.task == "link":
            if self.train.mode != "sample":
                raise ConfigError("link prediction trains on sampled minibatches.",
                                  field="train.mode", fix="pass --mode sample with --task link.")
            return
        given = [f.name for f in fields(LinkConfig)
                 if getattr(self.link, f.name) != getattr(LinkConfig(), f.name)]
        if given:
            flags = ", ".join(flag_of(LinkConfig, name) for name in given)
            raise ConfigError(f"{flags} set, but they apply to --task link and this run is "
                              "--task node.", field=f"link.{given[0]}",
                              fix=f"drop {flags}, or pass --task link.")

    def for_graph(self, typed: bool) -> Config:
        """The configuration as it runs on a typed (or homogeneous) graph.

        A copy whose ``auto`` settings are what the graph takes (``--eval auto``:
        :data:`AUTO_EVAL`); the run records this one.
        """
        if self.train.eval != "auto":
            return self
        return replace(self, train=replace(self.train, eval=AUTO_EVAL[typed]))

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (the run record's ``config``, ``OUT/config.json``)."""
        return to_dict(self)
