"""Synthetic graphs that behave like citation graphs: a stochastic block model and R-MAT.

Both generators return an undirected :class:`GraphDataset` (every edge stored in both
directions, no self-loops, no duplicates) with class labels that follow the graph's
community structure, noisy label-correlated features and random train/val/test splits.
The features alone classify a node only moderately well; averaging over neighbours (a
GNN) removes much of the noise, so a 2-layer GNN clearly beats a features-only MLP, as on
ogbn-arxiv. ``sbm(task="link")`` (spec ``synthetic:sbm?task=link``) is a link-prediction
task on the same model: held-out edges, ranked against random candidates.

Everything is vectorised numpy with bounded temporaries (features are drawn in blocks of
rows, R-MAT edges in blocks of edges), so 1M nodes / 10M edges take seconds; see
``benchmarks/bench_datasets.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from gnnpar.datasets.graph import GraphDataset, symmetrise, unique_sorted
from gnnpar.datasets.link_split import random_link_split
from gnnpar.datasets.splits import LINK_SPLIT
from gnnpar.datasets.typed import TypedGraphDataset
from gnnpar.errors import DatasetError
from gnnpar.sizes import NODE_BYTES, check_fits

_FEAT_ROWS = 1 << 16  # feature rows drawn at a time
_EDGE_BLOCK = 1 << 20  # R-MAT edges drawn at a time
_MAX_ROUNDS = 32  # edge top-up rounds before giving up on the exact edge count
# sbm's (homophily, feature_noise) defaults per task.
SBM_TASK_DEFAULTS = {"node": (0.3, 3.75), "link": (0.8, 2.0)}
"""The ``(train, val, test)`` shares of the edges in ``sbm(task="link")``."""
LINK_NUM_NEG = 100
"""Candidate destinations per validation/test edge in ``sbm(task="link")``."""


def _bad(name: str, value: object, need: str) -> DatasetError:
    """The error of a generator argument ``name`` that does not meet ``need``."""
    return DatasetError(f"got {value!r}; it {need}.", field=name,
                        fix=f"pass {name} {need.removeprefix('must be ')}.")


def _check_args(
    num_nodes: int, avg_degree: float, num_classes: int, feat_dim: int,
    feature_noise: float, split: Sequence[float], **probs: float,
) -> None:
    bad = _bad
    if num_nodes < 2:
        raise bad("num_nodes", num_nodes, "must be >= 2")
    if not 0 < avg_degree <= num_nodes - 1:
        raise bad("avg_degree", avg_degree, f"must be in (0, num_nodes - 1 = {num_nodes - 1}]")
    if not 1 <= num_classes <= num_nodes:
        raise bad("num_classes", num_classes, f"must be in [1, num_nodes = {num_nodes}]")
    if feat_dim < 1:
        raise bad("feat_dim", feat_dim, "must be >= 1")
    if feature_noise < 0:
        raise bad("feature_noise", feature_noise, "must be >= 0")
    check_fits(num_nodes, NODE_BYTES + 4 * feat_dim + int(16 * avg_degree),
               what=f"{num_nodes:,} nodes of {feat_dim} features and {avg_degree} edges",
               field="num_nodes", error=DatasetError,
               fix="pass fewer nodes, features or edges (?nodes=, feat_dim=, avg_degree=).")
    if len(split) != 3 or min(split) < 0 or sum(split) > 1 + 1e-9:
        raise bad("split", tuple(split), "must be 3 fractions (train, val, test) >= 0 summing "
                  "to <= 1")
    for name, p in probs.items():
        if not 0 <= p <= 1:
            raise bad(name, p, "must be a probability in [0, 1]")


def _undirected_edges(
    num_nodes: int, num_pairs: int, draw: Callable[[int], tuple[np.ndarray, np.ndarray]],
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw endpoint pairs until ``num_pairs`` distinct non-loop pairs exist; symmetrise.

    Args:
        num_nodes: ``N``.
        num_pairs: Undirected edges wanted.
        draw: ``draw(k) -> (u, v)`` samples ``k`` endpoint pairs (int64).
        rng: Random generator (for the unbiased cut to exactly ``num_pairs``).

    Returns:
        ``(src, dst)`` int64 ``[2 * num_pairs]`` sorted by ``(dst, src)``; fewer pairs only
        if the generator keeps producing duplicates for ``_MAX_ROUNDS`` rounds.
    """
    keys = np.zeros(0, dtype=np.int64)
    ask = num_pairs
    for _ in range(_MAX_ROUNDS):
        u, v = draw(ask)
        lo, hi = np.minimum(u, v), np.maximum(u, v)
        new = (lo * num_nodes + hi)[lo != hi]
        before = len(keys)
        keys = unique_sorted(np.concatenate([keys, new]))
        if len(keys) >= num_pairs:
            break
        gained = max(len(keys) - before, 1)
        # Ask for what is missing, scaled by this round's yield; at most 4x the target.
        ask = min(int((num_pairs - len(keys)) * ask / gained * 1.1) + 1024, 4 * num_pairs)
    if len(keys) > num_pairs:
        keys = keys[np.sort(rng.choice(len(keys), num_pairs, replace=False))]
    return symmetrise(num_nodes, keys // num_nodes, keys % num_nodes)


def _features(
    y: np.ndarray, num_classes: int, feat_dim: int, noise: float, rng: np.random.Generator,
) -> np.ndarray:
    """float32 ``[N, F]``: class centre (norm ~1) plus isotropic Gaussian noise (norm ~noise)."""
    centres = rng.standard_normal((num_classes, feat_dim), dtype=np.float32)
    centres /= np.float32(math.sqrt(feat_dim))
    x = np.empty((len(y), feat_dim), dtype=np.float32)
    for start in range(0, len(y), _FEAT_ROWS):
        block = x[start : start + _FEAT_ROWS]
        rng.standard_normal(dtype=np.float32, out=block)
        block *= np.float32(noise / math.sqrt(feat_dim))
        block += centres[y[start : start + _FEAT_ROWS]]
    return x


def _splits(
    num_nodes: int, split: Sequence[float], rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint sorted random ``train/val/test`` ids with the given fractions."""
    perm = rng.permutation(num_nodes)
    n_train, n_val, n_test = (int(f * num_nodes) for f in split)
    cuts = np.cumsum([n_train, n_val, n_test])
    return (np.sort(perm[: cuts[0]]), np.sort(perm[cuts[0] : cuts[1]]),
            np.sort(perm[cuts[1] : cuts[2]]))


def _dataset(
    name: str, num_nodes: int, edges: tuple[np.ndarray, np.ndarray], y: np.ndarray,
    num_classes: int, feat_dim: int, feature_noise: float, split: Sequence[float],
    rng: np.random.Generator,
) -> GraphDataset:
    x = _features(y, num_classes, feat_dim, feature_noise, rng)
    train_idx, val_idx, test_idx = _splits(num_nodes, split, rng)
    return GraphDataset(
        num_nodes=num_nodes, src=edges[0], dst=edges[1], x=x, y=y, train_idx=train_idx,
        val_idx=val_idx, test_idx=test_idx, name=name, num_classes=num_classes,
    )


def sbm(
    num_nodes: int = 32_768,
    avg_degree: float = 12.0,
    num_classes: int = 16,
    feat_dim: int = 64,
    seed: int = 0,
    homophily: float | None = None,
    feature_noise: float | None = None,
    split: Sequence[float] = (0.5, 0.25, 0.25),
    task: str = "node",
) -> GraphDataset:
    """A stochastic block model: equal-probability classes, ``homophily`` of edges inside one.

    Each node gets a uniformly random class. Every undirected edge picks a uniformly random
    endpoint, and its other endpoint uniformly from the same class with probability
    ``homophily``, otherwise from a uniformly random other class (so ``homophily`` is the
    expected fraction of intra-class edges). Features are the class centre (a random
    vector of norm ~1) plus isotropic Gaussian noise of total norm ~``feature_noise``.

    The defaults are gnnpar's embedded default graph (``synthetic:sbm``): 32,768 nodes,
    ~393k directed edges, 16 classes, 64 features, homophily 0.3, feature noise 3.75.
    Measured on it (seed 0, PyG, single-process full batch, 200 epochs of Adam lr 0.01,
    hidden 64, dropout 0.5, test accuracy at the best validation epoch): features-only
    2-layer MLP **57.5%**, 2-layer GCN **72.1%**, 2-layer GraphSAGE (mean) **75.6%**
    (ogbn-arxiv: MLP ~55%, GCN ~72%).

    ``task="link"`` (``synthetic:sbm?task=link``) builds the graph with homophily 0.8 and
    feature noise 2.0 unless given, then applies
    :func:`~gnnpar.datasets.link_split.random_link_split` with ``LINK_SPLIT`` = (0.85,
    0.05, 0.1) of the undirected edges, ``seed`` and ``LINK_NUM_NEG`` = 100 uniformly
    random candidate destinations per validation/test edge (``neg_kind="per_edge"``):
    held-out edges leave the graph in both directions. An edge falls inside a class far
    more often than a random pair, so it is predictable from the label-correlated
    features and, better, from the structure. Measured on the defaults (seed 0; test MRR
    over the 100 candidates, OGB's rank ``1 + (#neg > pos + #neg >= pos) / 2``): random
    scores **0.052**; the dot product of the raw features **0.196**, of 1-hop mean
    features (training graph, self included) **0.312**; the true classes alone (dot
    product of one-hot labels) 0.217; a 2-layer GraphSAGE (mean, hidden 64, dot-product
    decoder, one uniform negative per training edge, BCE, Adam lr 0.01, full batch)
    **0.316** at its best validation epoch, 0.30 after 10 epochs (~0.4 s an epoch on 4
    CPU threads; with ``num_nodes=4096``: 0.318, 100 epochs in ~4 s). The node labels and
    splits are kept.

    Args:
        num_nodes: Number of nodes ``N``.
        avg_degree: Average (in- = out-) degree; the graph has ``2 * floor(N * d / 2)``
            directed edges (before the link split takes its held-out edges out).
        num_classes: Number of classes ``C``.
        feat_dim: Feature width ``F``.
        seed: Random seed; the same arguments give the same graph (and link split).
        homophily: Expected fraction of edges whose endpoints share a class; default 0.3
            (``task="node"``) or 0.8 (``task="link"``).
        feature_noise: Norm of the feature noise relative to the class-centre norm;
            higher makes the features alone less informative; default 3.75
            (``task="node"``) or 2.0 (``task="link"``).
        split: ``(train, val, test)`` fractions of the nodes.
        task: ``"node"`` (node classification) or ``"link"`` (link prediction, above).

    Returns:
        An undirected :class:`GraphDataset` named ``"sbm"``.

    Shapes:
        ``x``: ``[N, F]`` float32, ``y``: ``[N]`` int64 in ``[0, C)``, ``src``/``dst``:
        ``[E]`` int64 sorted by ``(dst, src)``; with ``task="link"`` also
        ``train_edges`` ``[M, 2]`` (each training pair once, as ``(u, v)`` with ``u < v``),
        ``val_edges`` / ``test_edges`` ``[M', 2]`` and ``val_neg`` / ``test_neg``
        ``[M', 100]``.

    Example::

        ds = sbm(num_nodes=4096, task="link")  # "synthetic:sbm?nodes=4096&task=link"
        ds.test_edges.shape, ds.test_neg.shape  # (2459, 2), (2459, 100)
    """
    if task not in SBM_TASK_DEFAULTS:
        raise DatasetError(f"got {task!r}.", field="task",
                           fix=f"pass task as one of {', '.join(SBM_TASK_DEFAULTS)}.")
    default_homophily, default_noise = SBM_TASK_DEFAULTS[task]
    homophily = default_homophily if homophily is None else homophily
    feature_noise = default_noise if feature_noise is None else feature_noise
    _check_args(num_nodes, avg_degree, num_classes, feat_dim, feature_noise, split,
                homophily=homophily)
    rng = np.random.default_rng(seed)
    y = rng.integers(0, num_classes, size=num_nodes, dtype=np.int64)
    members = np.argsort(y, kind="stable")
    sizes = np.bincount(y, minlength=num_classes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    present = np.flatnonzero(sizes)

    def draw(k: int) -> tuple[np.ndarray, np.ndarray]:
        u = rng.integers(0, num_nodes, size=k, dtype=np.int64)
        cls = y[u]
        if len(present) > 1:
            other = rng.random(k) >= homophily
            # A uniformly random *other* non-empty class: shift within the present classes.
            pos = np.searchsorted(present, cls[other])
            shift = rng.integers(1, len(present), size=int(other.sum()))
            cls[other] = present[(pos + shift) % len(present)]
        v = members[starts[cls] + (rng.random(k) * sizes[cls]).astype(np.int64)]
        return u, v

    edges = _undirected_edges(num_nodes, int(num_nodes * avg_degree) // 2, draw, rng)
    ds = _dataset("sbm", num_nodes, edges, y, num_classes, feat_dim, feature_noise, split, rng)
    if task == "link":
        ds = random_link_split(ds, LINK_SPLIT, seed=seed, num_neg=LINK_NUM_NEG)
    return ds


def rmat(
    num_nodes: int = 32_768,
    avg_degree: float = 12.0,
    num_classes: int = 16,
    feat_dim: int = 64,
    seed: int = 0,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    homophily: float = 0.5,
    feature_noise: float = 3.75,
    split: Sequence[float] = (0.5, 0.25, 0.25),
) -> GraphDataset:
    """An R-MAT (recursive Kronecker) graph with power-law degrees and community labels.

    Each edge descends ``s = ceil(log2 N)`` levels of the adjacency matrix. The first
    ``k = ceil(log2 C)`` levels choose the communities: both endpoints take the same half
    with probability ``homophily ** (1 / k)`` (``(0,0)`` and ``(1,1)`` equally likely), so
    a fraction ~``homophily`` of edges stays inside one of the ``2**k`` communities. The
    other levels use the R-MAT quadrant probabilities ``(a, b, c, d = 1 - a - b - c)``,
    which give a power-law degree distribution inside every community. The ``2**s`` cells
    are mapped onto ``N`` nodes in order, node ids are then randomly permuted, and a
    node's label is its community (communities merged evenly when ``C`` is not a power of
    two). Features and splits are as in :func:`sbm`.

    Measured on the defaults (32,768 nodes, ~393k directed edges, seed 0; same protocol
    as :func:`sbm`): features-only 2-layer MLP **64.1%**, 2-layer GCN **78.5%**, 2-layer
    GraphSAGE (mean) **78.1%**. As in Graph500's R-MAT, many nodes have no edges (27% on
    the defaults, 45% at 1M nodes / degree 10); only their features classify those.

    Args:
        num_nodes: Number of nodes ``N``.
        avg_degree: Average degree; at most ``2 * floor(N * d / 2)`` directed edges
            (fewer only when the skew makes distinct pairs too rare to find).
        num_classes: Number of classes ``C``.
        feat_dim: Feature width ``F``.
        seed: Random seed; the same arguments give the same graph.
        a: Probability of the top-left quadrant (both endpoints in the low half).
        b: Probability of the top-right quadrant.
        c: Probability of the bottom-left quadrant.
        homophily: Expected fraction of edges inside one community.
        feature_noise: Norm of the feature noise relative to the class-centre norm.
        split: ``(train, val, test)`` fractions of the nodes.

    Returns:
        An undirected :class:`GraphDataset` named ``"rmat"``.

    Shapes:
        ``x``: ``[N, F]`` float32, ``y``: ``[N]`` int64 in ``[0, C)``, ``src``/``dst``:
        ``[E]`` int64 sorted by ``(dst, src)``.
    """
    _check_args(num_nodes, avg_degree, num_classes, feat_dim, feature_noise, split,
                a=a, b=b, c=c, homophily=homophily)
    if a + b + c > 1 + 1e-9:
        raise DatasetError(f"a + b + c = {a + b + c:.4f} > 1.", field="a, b, c",
                           fix="choose quadrant probabilities with a + b + c <= 1.")
    rng = np.random.default_rng(seed)
    scale = max(1, math.ceil(math.log2(num_nodes)))
    k = min(max(0, math.ceil(math.log2(num_classes))), scale)
    diag = homophily ** (1.0 / k) if k else 1.0
    # Cumulative quadrant thresholds per level: (0,0) | (0,1) | (1,0) | (1,1).
    community_level = np.cumsum([diag / 2, (1 - diag) / 2, (1 - diag) / 2])
    rmat_level = np.cumsum([a, b, c])

    def draw(m: int) -> tuple[np.ndarray, np.ndarray]:
        u_all = np.empty(m, dtype=np.int64)
        v_all = np.empty(m, dtype=np.int64)
        for start in range(0, m, _EDGE_BLOCK):
            n = min(_EDGE_BLOCK, m - start)
            u = np.zeros(n, dtype=np.int64)
            v = np.zeros(n, dtype=np.int64)
            for level in range(scale):
                t = community_level if level < k else rmat_level
                r = rng.random(n, dtype=np.float32)
                u = (u << 1) | (r >= t[1])
                v = (v << 1) | ((r >= t[0]) & (r < t[1]) | (r >= t[2]))
            u_all[start : start + n] = u
            v_all[start : start + n] = v
        # Cell -> node in order (at most two cells per node), then a random relabelling.
        return perm[(u_all * num_nodes) >> scale], perm[(v_all * num_nodes) >> scale]

    perm = rng.permutation(num_nodes).astype(np.int64)
    first_cell = (np.arange(num_nodes, dtype=np.int64) << scale) // num_nodes
    first_cell += ((first_cell * num_nodes) >> scale) < np.arange(num_nodes)
    community = first_cell >> (scale - k)
    y = np.empty(num_nodes, dtype=np.int64)
    y[perm] = (community * num_classes) >> k
    edges = _undirected_edges(num_nodes, int(num_nodes * avg_degree) // 2, draw, rng)
    return _dataset("rmat", num_nodes, edges, y, num_classes, feat_dim, feature_noise, split,
                    rng)


def _pick(rng: np.random.Generator, cls: np.ndarray, homophily: float, members: np.ndarray,
          starts: np.ndarray, sizes: np.ndarray, n: int) -> np.ndarray:
    """Per entry of ``cls``: w.p. ``homophily`` a uniform member of that class, else any id.

    ``members`` lists the ids grouped by class (``starts`` / ``sizes`` per class, every
    class non-empty); the fallback is uniform over ``[0, n)``.
    """
    k = len(cls)
    same = members[starts[cls] + (rng.random(k) * sizes[cls]).astype(np.int64)]
    return np.where(rng.random(k) < homophily, same, rng.integers(0, n, size=k))


def _groups(y: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids sorted by class, first position of each class, size of each class)``."""
    sizes = np.bincount(y, minlength=num_classes)
    return (np.argsort(y, kind="stable"), np.concatenate([[0], np.cumsum(sizes)[:-1]]),
            sizes)


def typed(
    num_papers: int = 3000,
    num_authors: int = 1500,
    num_venues: int = 60,
    num_classes: int = 6,
    feat_dim: int = 32,
    seed: int = 0,
    venue_homophily: float = 0.9,
    author_homophily: float = 0.8,
    papers_per_author: int = 3,
    citations: int = 8,
    cite_homophily: float = 0.1,
    feature_noise: float = 5.0,
    split: Sequence[float] = (0.6, 0.2, 0.2),
) -> TypedGraphDataset:
    """A typed citation graph whose labels are readable through one relation type.

    Node types ``paper`` (features, labels: the target), ``author`` and ``venue``
    (featureless). Papers get uniformly random classes ``0 .. C-1``; venue ``v`` has class
    ``v % C``; authors get uniformly random classes. Relations, in this order:

    - ``(author, writes, paper)``: each author writes ``papers_per_author`` papers, each
      w.p. ``author_homophily`` a uniformly random paper of the author's class, else any
      paper (duplicates dropped);
    - ``(paper, published_in, venue)``: each paper in one venue, w.p. ``venue_homophily``
      a uniformly random venue of its class, else any venue;
    - ``(paper, cites, paper)``: ``citations`` draws per paper, the cited paper w.p.
      ``cite_homophily`` of the same class, else any (mostly noise), self-loops dropped,
      then symmetrised (both directions, duplicates dropped);
    - ``(paper, rev_writes, author)`` and ``(venue, rev_published_in, paper)``: the
      reverses (:meth:`~gnnpar.datasets.typed.TypedGraphDataset.add_reverse`).

    Paper features are the class centre plus Gaussian noise as in :func:`sbm`
    (``feature_noise``); the split is ``random_split(split, seed)`` of the papers.

    The graph is built so that *typing* matters: the label sits in the venue (and author)
    relations, which a homogeneous mean aggregator drowns in ~16 mostly random citation
    neighbours (and whose featureless nodes it treats like papers), while
    relation-specific weights read it directly. Measured on the defaults (PyG, full
    batch, 2 layers, hidden 32, Adam lr 0.01, 80 epochs, CPU; the featureless types get
    all-zero input features in both graph models; test accuracy after the last epoch),
    seed 0: features-only 2-layer MLP **41.3%**, homogeneous GraphSAGE (mean) on
    ``to_homogeneous().to_pyg()`` **58.8%**, ``to_hetero(GraphSAGE, metadata,
    aggr="sum")`` on ``to_pyg()`` **86.5%**; seeds 1 and 2 (100 epochs): homogeneous
    57.8% / 60.2%, typed 87.7% / 86.8%. So the typed model beats the homogeneous one by
    ~27 points (``tests/datasets/test_datasets_typed.py`` asserts typed > 0.8 and typed >
    homogeneous + 0.05). Generates in ~10 ms at the defaults.

    Args:
        num_papers: Papers (target nodes).
        num_authors: Authors.
        num_venues: Venues, at least ``num_classes`` (so every class has one).
        num_classes: Number of classes ``C``.
        feat_dim: Paper feature width ``F``.
        seed: Random seed; the same arguments give the same graph and split.
        venue_homophily: Probability that a paper's venue is of its class.
        author_homophily: Probability that an author's paper is of the author's class.
        papers_per_author: Papers drawn per author.
        citations: Citation draws per paper (before symmetrising).
        cite_homophily: Probability that a citation stays inside the class.
        feature_noise: Norm of the feature noise relative to the class-centre norm.
        split: ``(train, val, test)`` fractions of the papers.

    Returns:
        A :class:`~gnnpar.datasets.typed.TypedGraphDataset` named ``"typed"``.

    Example::

        ds = typed(num_papers=2000)  # "synthetic:typed?papers=2000"
        ds.edge_types[-1]             # ('venue', 'rev_published_in', 'paper')
    """
    _check_args(num_papers, 1.0, num_classes, feat_dim, feature_noise, split,  # no degree
                venue_homophily=venue_homophily, author_homophily=author_homophily,
                cite_homophily=cite_homophily)
    for fld, value, low in (("num_authors", num_authors, 1), ("num_venues", num_venues,
                            num_classes), ("papers_per_author", papers_per_author, 1),
                            ("citations", citations, 0)):
        if value < low:
            raise _bad(fld, value, f"must be >= {low}")
    rng = np.random.default_rng(seed)
    # Uniform classes, each present at least once (the first C papers, before a shuffle).
    y = rng.integers(0, num_classes, size=num_papers, dtype=np.int64)
    y[:num_classes] = np.arange(num_classes)
    rng.shuffle(y)
    papers = _groups(y, num_classes)
    venues = _groups(np.arange(num_venues, dtype=np.int64) % num_classes, num_classes)
    author_cls = rng.integers(0, num_classes, size=num_authors, dtype=np.int64)

    writer = np.repeat(np.arange(num_authors, dtype=np.int64), papers_per_author)
    written = _pick(rng, author_cls[writer], author_homophily, *papers, num_papers)
    key = unique_sorted(writer * num_papers + written)
    venue = _pick(rng, y, venue_homophily, *venues, num_venues)
    citing = np.repeat(np.arange(num_papers, dtype=np.int64), citations)
    cited = _pick(rng, y[citing], cite_homophily, *papers, num_papers)
    keep = citing != cited
    ds = TypedGraphDataset(
        num_nodes={"paper": num_papers, "author": num_authors, "venue": num_venues},
        edges={
            ("author", "writes", "paper"): (key // num_papers, key % num_papers),
            ("paper", "published_in", "venue"): (np.arange(num_papers, dtype=np.int64), venue),
            ("paper", "cites", "paper"): (citing[keep], cited[keep]),  # symmetrised below
        },
        x={"paper": _features(y, num_classes, feat_dim, feature_noise, rng)},
        target="paper", y=y, name="typed", num_classes=num_classes,
    ).add_reverse()
    return ds.random_split(split, seed)
