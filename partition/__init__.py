"""Partition stage: split a graph into K parts and write the partition directory."""

from gnnpar.partition.format import (
    FORMAT_VERSION,
    Partition,
    PartitionMeta,
    load_partition,
    verify_checksums,
)

__all__ = ["FORMAT_VERSION", "Partition", "PartitionMeta", "load_partition", "verify_checksums"]
