"""Partition stage: split a graph into K parts and write the partition directory."""

from gnnpar.partition.assign import BALANCE_QUANTITIES, DEFAULT_BALANCE, METHODS
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import (
    FORMAT_VERSION,
    Partition,
    PartitionMeta,
    load_partition,
    verify_checksums,
)
from gnnpar.partition.quality import format_quality
from gnnpar.partition.verify import VerifyReport, verify_partition
from gnnpar.partition.writer import partition_graph

__all__ = [
    "BALANCE_QUANTITIES",
    "DEFAULT_BALANCE",
    "FORMAT_VERSION",
    "METHODS",
    "Partition",
    "PartitionConfig",
    "PartitionMeta",
    "VerifyReport",
    "format_quality",
    "load_partition",
    "partition_graph",
    "verify_checksums",
    "verify_partition",
]
