"""Datasets stage: turn any graph a user has into a :class:`GraphDataset`.

Loaders for OGB, PyG, DGL, ``.npz`` and edge lists, two synthetic generators, and the
dataset spec strings every gnnpar CLI accepts (:func:`load_dataset`, with ``features=``,
``labels=`` and ``split=`` for graphs that bring only edges; :func:`parse_split` reads
``--split``).
"""

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.loaders import from_edge_list, from_npz
from gnnpar.datasets.ogb import load_ogb
from gnnpar.datasets.pyg import from_dgl, from_pyg, from_pyg_link
from gnnpar.datasets.spec import DEFAULT_SPEC, load_dataset, parse_split
from gnnpar.datasets.splits import split_sizes
from gnnpar.datasets.synthetic import rmat, sbm

__all__ = [
    "DEFAULT_SPEC",
    "GraphDataset",
    "from_dgl",
    "from_edge_list",
    "from_npz",
    "from_pyg",
    "from_pyg_link",
    "load_dataset",
    "load_ogb",
    "parse_split",
    "rmat",
    "sbm",
    "split_sizes",
]
