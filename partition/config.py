"""The ``partition`` section of ``gnnpar-partition`` and ``gnnpar-train``: how to split a graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gnnpar.config import check_choice, check_int, option
from gnnpar.errors import ConfigError
from gnnpar.partition.assign import DEFAULT_BALANCE, METHODS, check_balance
from gnnpar.partition.format import FEATURE_DTYPES

if TYPE_CHECKING:
    from gnnpar.datasets.graph import GraphDataset
    from gnnpar.partition.format import PartitionMeta


@dataclass
class PartitionConfig:
    """How a dataset is split into parts (one part per training process)."""

    num_parts: int | None = None
    """Number of parts K (gnnpar-train: default and only value, the number of
    processes)."""

    partitioner: str = "metis"
    """metis (few cut edges, balanced), random (seeded) or contiguous (id ranges)."""

    halo_hops: int = 1
    """Halo depth: halo nodes within HALO_HOPS - 1 hops also keep their in-edges, so
    deeper sampling hops need no remote adjacency."""

    balance: tuple[str, ...] = DEFAULT_BALANCE
    """Quantities METIS balances across parts, of nodes, train, edges."""

    seed: int = option(0, flag="partition-seed")
    """Seed of METIS and of the random partitioner."""

    feature_dtype: str = "fp32"
    """How features are stored and sent: fp32, or bf16 / fp16 (half the bytes on disk,
    in memory and on the wire; bf16 keeps fp32's range)."""

    def validate(self) -> PartitionConfig:
        """Check every value without reading data; return ``self`` or raise."""
        if self.num_parts is not None:
            check_int(PartitionConfig, "partition.num_parts", self.num_parts, 1)
        check_choice(PartitionConfig, "partition.partitioner", self.partitioner, METHODS)
        check_int(PartitionConfig, "partition.halo_hops", self.halo_hops, 1)
        check_int(PartitionConfig, "partition.seed", self.seed, 0)
        check_choice(PartitionConfig, "partition.feature_dtype", self.feature_dtype,
                     tuple(FEATURE_DTYPES))
        try:
            check_balance(self.balance)
        except ConfigError as exc:
            raise ConfigError(exc.message, field="partition.balance",
                              fix="pass --balance with some of nodes,train,edges.") from None
        return self

    def arguments(self) -> dict[str, Any]:
        """Keyword arguments of :func:`~gnnpar.partition.partition_graph`."""
        return {"method": self.partitioner, "halo_hops": self.halo_hops,
                "balance": tuple(self.balance), "seed": self.seed,
                "feature_dtype": self.feature_dtype}

    def run(self, dataset: GraphDataset, num_parts: int, out: str, *, overwrite: bool = False,
            progress: bool = False) -> PartitionMeta:
        """Partition a (validated) ``dataset`` into ``num_parts`` parts written to ``out``."""
        from gnnpar.partition.writer import partition_graph

        return partition_graph(dataset, num_parts, out, overwrite=overwrite, progress=progress,
                               validate=False, **self.arguments())
