"""The ``data`` section of every command's configuration: which graph, and how to read it.

Shared by ``gnnpar-train``, ``gnnpar-partition`` and ``python -m gnnpar.datasets`` (one
flag per field, see :mod:`gnnpar.config`), so a graph is named the same way everywhere::

    gnnpar-partition edges.csv --features x.npy --labels y.csv --split 0.6,0.2,0.2 ...
    gnnpar-train     edges.csv --features x.npy --labels y.csv --split 0.6,0.2,0.2 --nproc 2
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from gnnpar.config import check_choice, check_int, option
from gnnpar.datasets.graph import SPLITS, GraphDataset
from gnnpar.datasets.spec import DEFAULT_SPEC
from gnnpar.datasets.splits import LINK_SPLIT, NODE_SPLIT
from gnnpar.datasets.typed import REVERSE_MODES, TypedGraphDataset
from gnnpar.errors import ConfigError, DatasetError

log = logging.getLogger("gnnpar")
TASKS = ("node", "link")


@dataclass
class DataConfig:
    """What graph to use (see gnnpar.datasets for every accepted form)."""

    dataset: str = option(DEFAULT_SPEC, flag="dataset")
    """Dataset spec: synthetic:sbm[?key=value&...], synthetic:rmat[?...], an OGB name
    (ogbn-arxiv), an OGB meta_dict .json, a saved dataset directory, a .npz or an edge
    list (.csv/.tsv/.txt); gnnpar-train also takes a partition directory."""

    root: str = "data"
    """Directory of downloaded OGB datasets, and of cached partitions
    (ROOT/partitions)."""

    features: str | None = None
    """Node features of an edge list: .npy or CSV, one row per node."""

    labels: str | None = None
    """Node labels of an edge list: .npy or CSV, one integer class per node (-1 =
    unlabelled)."""

    task: str = "node"
    """What the graph is for: node (classification of labelled nodes) or link
    (prediction of edges: supervision edges and fixed negatives per split)."""

    split: str | None = None
    """Train/val/test split: fractions of the labelled nodes (e.g. 0.6,0.2,0.2; a
    random split seeded by --split-seed) or three files of node ids
    (TRAIN,VAL,TEST, .npy or one id per line); with --task link, fractions of the
    edges (e.g. 0.85,0.05,0.1: val/test edges leave the graph, 100 random candidate
    negatives each); replaces the dataset's own split. (default: the dataset's own
    split; a graph without one gets a random 0.6,0.2,0.2 of its labelled nodes, or
    0.85,0.05,0.1 of its edges with --task link, seeded by --split-seed and logged)"""

    split_seed: int = 0
    """Seed of the random split of --split fractions."""

    undirected: bool = False
    """Add every reverse edge (deduplicated) before partitioning, as usual for directed
    citation graphs such as ogbn-arxiv and ogbn-papers100M."""

    reverse: str = "auto"
    """Typed graphs (ogbn-mag, a meta_dict with is hetero, a typed .npz or saved
    directory): auto (add the reverse of each relation unless the graph stores it, by
    name such as rev_R or by endpoints; symmetrise same-type relations; what it changed
    is logged, per relation), add (add every reverse) or none (the relations as
    stored)."""

    def validate(self) -> DataConfig:
        """Check every value without reading data; return ``self`` or raise."""
        if not isinstance(self.dataset, str) or not self.dataset:
            raise ConfigError("the dataset is empty.", field="data.dataset",
                              fix="pass a dataset spec such as synthetic:sbm.")
        check_int(DataConfig, "data.split_seed", self.split_seed, 0)
        check_choice(DataConfig, "data.task", self.task, TASKS)
        check_choice(DataConfig, "data.reverse", self.reverse, REVERSE_MODES)
        if self.split is not None:
            from gnnpar.datasets.spec import parse_split

            try:
                split = parse_split(self.split)
            except DatasetError as exc:
                raise ConfigError(f"--split {self.split}: {exc.message}", field="data.split",
                                  fix=exc.fix) from None
            if self.task == "link" and isinstance(split[0], str):
                raise ConfigError(f"--split {self.split} names files, and a link split is "
                                  "one of the edges.", field="data.split",
                                  fix="pass fractions of the edges, e.g. --split 0.85,0.05,0.1 "
                                  "(or a dataset with its own supervision edges).")
        return self

    def load(self) -> GraphDataset:
        """The dataset, with the edge-list files and the split applied (validated).

        With ``task="link"``, ``split`` fractions split the edges after ``undirected``
        (:meth:`GraphDataset.random_link_split`; without ``split``, a graph that has no
        supervision edges gets :data:`~gnnpar.datasets.splits.LINK_SPLIT`), and the result
        must have training supervision edges.  A node task on a graph with labels but no
        split, and no ``split``, gets :data:`~gnnpar.datasets.splits.NODE_SPLIT` of its
        labelled nodes.  Each default split is logged.

        Raises:
            DatasetError: The spec names a typed graph (field ``data.dataset``; a
                command that reads typed graphs calls :meth:`load_any`).
        """
        dataset = self.load_any()
        if isinstance(dataset, TypedGraphDataset):
            raise DatasetError(
                f"is a typed graph ({len(dataset.node_types)} node types, "
                f"{len(dataset.edge_types)} relations); this command reads homogeneous "
                "graphs.", path=self.dataset, field="data.dataset",
                fix="pass a homogeneous dataset, or convert it in Python with "
                    "TypedGraphDataset.to_homogeneous() and save that.")
        return dataset

    def load_any(self) -> GraphDataset | TypedGraphDataset:
        """:meth:`load`, and a typed graph as a :class:`TypedGraphDataset`.

        A typed graph takes neither ``task="link"`` nor ``undirected`` (its reverse
        relations come with it).
        """
        from gnnpar.datasets.spec import load_dataset, parse_split

        split = None if self.split is None else parse_split(self.split)
        link = self.task == "link"
        dataset = load_dataset(
            self.dataset, self.root, features=self.features, labels=self.labels,
            split=None if link else split, split_seed=self.split_seed, reverse=self.reverse)
        if split is None and not link:
            dataset = self._default_node_split(dataset)
        if isinstance(dataset, TypedGraphDataset):
            for on, flag, what in ((link, "--task link", "a typed link task"),
                                   (self.undirected, "--undirected", "symmetrising")):
                if on:
                    raise DatasetError(f"is a typed graph; {flag} ({what}) applies to "
                                       "homogeneous graphs.", path=self.dataset,
                                       field="data.task" if link else "data.undirected",
                                       fix=f"drop {flag} (typed datasets bring their "
                                           "reverse relations: see --reverse).")
            return dataset
        if self.reverse != "auto":
            raise DatasetError(f"is a homogeneous graph; --reverse {self.reverse} applies to "
                               "typed graphs.", path=self.dataset, field="data.reverse",
                               fix="drop --reverse (--undirected adds reverse edges to a "
                               "homogeneous graph).")
        if self.undirected:
            dataset = dataset.to_undirected()
        why = ""
        if link and split is None and not dataset.has_link_task:
            split, why = LINK_SPLIT, "it has no supervision edges, so "
        if link and split is not None:
            fractions = tuple(float(f) for f in split)
            dataset = dataset.random_link_split(fractions, seed=self.split_seed)
            log.info("%s: %sa random link split %s of the edges (seed %d): train %d, val %d, "
                     "test %d edges.", self.dataset, why, ",".join(f"{f:g}" for f in fractions),
                     self.split_seed, len(dataset.train_edges), len(dataset.val_edges),
                     len(dataset.test_edges))
        if link:
            dataset.require_link_task(self.dataset)
        return dataset

    def _default_node_split(self, dataset: GraphDataset | TypedGraphDataset
                            ) -> GraphDataset | TypedGraphDataset:
        """``dataset``, or, when it has labels but no split, :data:`NODE_SPLIT` of them."""
        labelled = 0 if dataset.y is None else int((np.asarray(dataset.y) >= 0).sum())
        if not labelled or any(len(getattr(dataset, s)) for s in SPLITS):
            return dataset
        split = dataset.random_split(NODE_SPLIT, seed=self.split_seed)
        log.info("%s: it has no split, so a random split %s of its %s labelled nodes (seed "
                 "%d; --split chooses another): train %s, val %s, test %s.", self.dataset,
                 ",".join(f"{f:g}" for f in NODE_SPLIT), f"{labelled:,}", self.split_seed,
                 *(f"{len(getattr(split, s)):,}" for s in SPLITS))
        return split
