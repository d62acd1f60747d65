"""The ``partition`` section of ``gnnpar-partition`` and ``gnnpar-train``: how to split a graph."""

from __future__ import annotations

from dataclasses import dataclass

from gnnpar.config import check_choice, check_int, check_number, config_error, option
from gnnpar.errors import ConfigError
from gnnpar.partition.assign import DEFAULT_BALANCE, KAMINPAR_REPEATS, METHODS, check_balance
from gnnpar.partition.format import FEATURE_DTYPES

HOW_ONLY = ("memory_budget", "workers", "threads")
"""Settings that change how a partition is made but not its bytes (nor a run's)."""


@dataclass
class PartitionConfig:
    """How a dataset is split into parts (one part per training process).

    The ``config`` of :func:`~gnnpar.partition.partition_graph` (and of every stage it
    passes it down to) and the ``partition`` section of ``gnnpar-partition`` and
    ``gnnpar-train``, whose flag of a field is its name (``halo_hops``: ``--halo-hops``)
    but for ``seed`` (``--partition-seed``), ``threads`` (``--partition-threads``),
    ``compress`` (``--kaminpar-compress``) and ``repeats`` (``--kaminpar-repeats``).

    Example::

        config = PartitionConfig(num_parts=4, partitioner="random", seed=1,
                                 balance=("nodes", "train"))
        meta = gnnpar.partition_graph(dataset, "parts/mine-4", config)
    """

    num_parts: int | None = None
    """Number of parts K (gnnpar-train: default and only value, the number of
    processes; partitioning needs it set)."""

    partitioner: str = "metis"
    """metis (few cut edges, balanced), kaminpar (as good, multi-threaded, less memory;
    pip install 'gnnpar[kaminpar]'), stream (streaming, for graphs whose CSR does not
    fit in memory), random (seeded) or contiguous (id ranges)."""

    halo_hops: int = 1
    """Halo depth: halo nodes within HALO_HOPS - 1 hops also keep their in-edges, so
    deeper sampling hops need no remote adjacency."""

    balance: tuple[str, ...] = DEFAULT_BALANCE
    """Quantities the partitioner balances across parts, of nodes, train, work (the rows
    a part's training batches compute: what a rank's CPU per epoch follows), sampled
    (expected sampled edges of a part's seeds) and edges (stored in-edges); gnnpar-train
    --mode full balances nodes,train,edges where this is left at its default."""

    work_fanouts: tuple[int, ...] | None = None
    """Fan-outs of the training the work and sampled balance is for (seeds outwards);
    gnnpar-train: its own --fanouts, gnnpar-partition: 10,10 (gnnpar-train's
    default)."""

    work_batch_size: int | None = None
    """Seeds per batch of that training; gnnpar-train: its own --batch-size,
    gnnpar-partition: 1024."""

    seed: int = option(0, flag="partition-seed")
    """Seed of the partitioner."""

    memory_budget: float = 2.0
    """GB of working set for the chunked stages (grouping edges, building the
    undirected graph), beside the partitioner's own memory and O(nodes) id arrays."""

    workers: int = 1
    """Processes writing parts side by side (the output is the same for any number)."""

    threads: int = option(1, flag="partition-threads")
    """Threads of the kaminpar partitioner."""

    compress: bool = option(False, flag="kaminpar-compress")
    """kaminpar holds the graph compressed (less memory, a little more time)."""

    repeats: int = option(KAMINPAR_REPEATS, flag="kaminpar-repeats")
    """kaminpar runs with this many seeds and keeps the partition that cuts fewest edges
    after balancing (1: a third of the time)."""

    feature_dtype: str = "fp32"
    """How features are stored and sent: fp32, or bf16 / fp16 (half the bytes on disk,
    in memory and on the wire; bf16 keeps fp32's range)."""

    def __post_init__(self) -> None:
        """Keep a list given for ``balance`` as a tuple."""
        if isinstance(self.balance, list):
            self.balance = tuple(self.balance)

    def validate(self) -> PartitionConfig:
        """Check every value without reading data; return ``self`` or raise.

        Raises:
            ConfigError: Naming the field (``partition.halo_hops``), its flag and a
                valid value.
        """
        if self.num_parts is not None:
            check_int(PartitionConfig, "partition.num_parts", self.num_parts, 1)
        check_choice(PartitionConfig, "partition.partitioner", self.partitioner, METHODS)
        check_int(PartitionConfig, "partition.halo_hops", self.halo_hops, 1)
        check_int(PartitionConfig, "partition.seed", self.seed, 0)
        check_int(PartitionConfig, "partition.workers", self.workers, 1)
        check_int(PartitionConfig, "partition.threads", self.threads, 1)
        check_int(PartitionConfig, "partition.repeats", self.repeats, 1)
        check_number(PartitionConfig, "partition.memory_budget", self.memory_budget, 0.001)
        if self.work_fanouts is not None and (
                not isinstance(self.work_fanouts, tuple) or not self.work_fanouts
                or not all(isinstance(f, int) and (f > 0 or f == -1)
                           for f in self.work_fanouts)):
            raise config_error(PartitionConfig, "partition.work_fanouts", self.work_fanouts,
                               "one fan-out per hop, each positive or -1 (all)", "15,10")
        if self.work_batch_size is not None:
            check_int(PartitionConfig, "partition.work_batch_size", self.work_batch_size, 1)
        check_choice(PartitionConfig, "partition.feature_dtype", self.feature_dtype,
                     tuple(FEATURE_DTYPES))
        fix = ("pass a tuple of some of 'nodes', 'train', 'work', 'sampled', 'edges' "
               "(--balance nodes,train,work).")
        if not isinstance(self.balance, tuple):
            raise ConfigError(f"got {self.balance!r}; need a tuple of names.",
                              field="partition.balance", fix=fix)
        try:
            check_balance(self.balance)
        except ConfigError as exc:
            raise ConfigError(exc.message, field="partition.balance", fix=fix) from None
        return self

    def require_parts(self) -> int:
        """``num_parts``, which partitioning needs; :class:`ConfigError` when unset."""
        if self.num_parts is None:
            raise ConfigError("the number of parts is missing.", field="partition.num_parts",
                              fix="pass --num-parts K (PartitionConfig(num_parts=K) in "
                              "Python).")
        return self.num_parts
