"""Datasets stage: turn any graph a user has into a :class:`GraphDataset`.

Typed graphs (node types and relations: ogbn-mag, PyG ``HeteroData``, a typed ``.npz``,
``synthetic:typed``) become a :class:`HeteroGraphDataset`, whose :class:`HeteroLayout`
maps them onto one homogeneous id space. Loaders for OGB, PyG, DGL, ``.npz`` and edge
lists, three synthetic generators, and the
dataset spec strings every gnnpar CLI accepts (:func:`load_dataset`, with ``features=``,
``labels=`` and ``split=`` for graphs that bring only edges; :func:`parse_split` reads
``--split``).
"""

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.hetero import HeteroGraphDataset, HeteroLayout
from gnnpar.datasets.loaders import from_edge_list, from_hetero_npz, from_npz
from gnnpar.datasets.ogb import load_ogb
from gnnpar.datasets.pyg import from_dgl, from_pyg, from_pyg_hetero, from_pyg_link
from gnnpar.datasets.spec import DEFAULT_SPEC, load_dataset, parse_split
from gnnpar.datasets.splits import split_sizes
from gnnpar.datasets.synthetic import rmat, sbm, typed

__all__ = [
    "DEFAULT_SPEC",
    "GraphDataset",
    "HeteroGraphDataset",
    "HeteroLayout",
    "from_dgl",
    "from_edge_list",
    "from_hetero_npz",
    "from_npz",
    "from_pyg",
    "from_pyg_hetero",
    "from_pyg_link",
    "load_dataset",
    "load_ogb",
    "parse_split",
    "rmat",
    "sbm",
    "split_sizes",
    "typed",
]
