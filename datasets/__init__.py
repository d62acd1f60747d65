"""Datasets stage: turn any graph a user has into a :class:`~gnnpar.datasets.graph.GraphDataset`.

Typed graphs (node types and relations: ogbn-mag, PyG ``HeteroData``, a typed ``.npz``,
``synthetic:typed``) become a :class:`~gnnpar.datasets.typed.TypedGraphDataset`, whose
:class:`~gnnpar.typed.TypedLayout` maps them onto one homogeneous id space. Loaders for
OGB, PyG, DGL, ``.npz`` and edge lists (:mod:`~gnnpar.datasets.loaders`,
:mod:`~gnnpar.datasets.ogb`, :mod:`~gnnpar.datasets.pyg`), three synthetic generators
(:mod:`~gnnpar.datasets.synthetic`), and the dataset spec strings every gnnpar CLI accepts
(:func:`~gnnpar.datasets.spec.load_dataset`, with ``features=``, ``labels=`` and
``split=`` for graphs that bring only edges; :func:`~gnnpar.datasets.spec.parse_split`
reads ``--split``).  Import each name from its module; this package re-exports nothing.
"""
