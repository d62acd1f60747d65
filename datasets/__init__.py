"""Datasets stage: turn any graph a user has into a :class:`GraphDataset`."""

from gnnpar.datasets.graph import GraphDataset

__all__ = ["GraphDataset"]
