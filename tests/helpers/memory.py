"""Graphs and the rank function of the memory tests (module-level, for spawned ranks).

:func:`scaled_graph` builds graphs whose part 0 is the same — nodes, edges, halo,
features, splits — whatever the total node count: the other part grows with isolated,
unlabelled nodes.  :func:`memory_worker` measures on each rank what the trainer's
runtime objects hold and how far the resident set grows (see :func:`measure`).
"""

from __future__ import annotations

import ctypes
import gc
import re
from typing import Any

import numpy as np

from gnnpar.datasets.graph import GraphDataset

OWNED = 40_000
"""Nodes of part 0 in every graph."""
DEGREE = 8
"""In-edges of each part-0 node from part 0."""
HALO = 4_000
"""Part-1 nodes that part-0 nodes have in-edges from (part 0's halo)."""
FEAT = 32
FANOUTS = (10, 5)
BATCH = 256
BATCHES = 3
HIDDEN = 32
BUDGET = 1 << 20
"""Inference chunk budget in bytes."""


def scaled_graph(num_nodes: int, seed: int = 0) -> tuple[GraphDataset, np.ndarray]:
    """A graph of ``num_nodes`` nodes whose part 0 (nodes ``0 .. OWNED``) never changes.

    Part 0: ``DEGREE`` in-edges per node from part 0 and one from the first ``HALO`` nodes
    of part 1, which have the reverse edges and a ring among themselves; the rest of part
    1 is isolated and unlabelled.  The splits hold part-0 and halo nodes only.

    Returns:
        The dataset and its node -> part assignment.
    """
    rng = np.random.default_rng(seed)
    own = np.arange(OWNED)
    src = [rng.integers(0, OWNED, OWNED * DEGREE), OWNED + rng.integers(0, HALO, OWNED)]
    dst = [np.repeat(own, DEGREE), own]
    src.append(dst[1])
    dst.append(src[1])  # the halo's in-edges from part 0 (rank 1 samples them)
    ring = OWNED + np.arange(HALO)
    src.append(ring)
    dst.append(OWNED + (np.arange(HALO) + 1) % HALO)
    labelled = OWNED + HALO
    y = np.full(num_nodes, -1, dtype=np.int64)
    y[:labelled] = rng.integers(0, 4, labelled)
    x = np.zeros((num_nodes, FEAT), dtype=np.float32)
    x[:labelled] = rng.standard_normal((labelled, FEAT), dtype=np.float32)
    perm = rng.permutation(labelled)
    third = labelled // 3
    ds = GraphDataset(num_nodes=num_nodes, src=np.concatenate(src), dst=np.concatenate(dst),
                      x=x, y=y, train_idx=np.sort(perm[:third]),
                      val_idx=np.sort(perm[third:2 * third]), test_idx=np.sort(perm[2 * third:]),
                      name="scaled", num_classes=4)
    return ds, (np.arange(num_nodes) >= OWNED).astype(np.int64)


def _status(key: str) -> int:
    """A ``/proc/self/status`` figure in bytes (``VmRSS``, ``VmHWM``)."""
    text = open("/proc/self/status").read()
    return int(re.search(rf"{key}:\s+(\d+) kB", text).group(1)) * 1024  # type: ignore[union-attr]


def _reset_peak() -> int:
    """Make ``VmHWM`` the current resident set (Linux ``clear_refs``); return it."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS")


def tensor_bytes(*roots: Any) -> int:
    """Bytes of the distinct tensor storages reachable from ``roots`` (attributes, dicts,
    lists, tuples), each storage counted once."""
    import torch

    seen: set[int] = set()
    storages: dict[int, int] = {}
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            s = obj.untyped_storage()
            storages[s.data_ptr()] = s.nbytes()
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set)):
            stack.extend(obj)
        elif isinstance(obj, torch.nn.Module):
            stack.extend(obj.state_dict(keep_vars=True).values())
            stack.extend(v for k, v in vars(obj).items() if not k.startswith("_"))
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("gnnpar"):
            stack.extend(vars(obj).values())
    return sum(storages.values())


def measure(part_dir: str) -> dict[str, Any]:
    """Rank's memory for the trainer's objects on ``part_dir``, steps and final inference.

    Builds what ``Trainer`` builds in sample mode (``DistGraph``, the feature store, the
    train / val / test loaders and their samplers), runs :data:`BATCHES` training steps
    and the full-neighbour inference.  ``held``: bytes of the tensors these objects hold
    after the steps; ``peak``: growth of the resident set's peak over the run (``VmHWM``
    reset first), file-backed pages of the memory-mapped part included.
    """
    import torch
    import torch.nn.functional as F

    from gnnpar.comm import CommStats
    from gnnpar.distributed import init
    from gnnpar.evaluation.node import full_neighbour_accuracy
    from gnnpar.models.node import build_model, forward_batch
    from gnnpar.nn.halo import HaloPlan
    from gnnpar.parallel_dims import ParallelDims
    from gnnpar.storage.graph import DistGraph, global_split_sizes
    from gnnpar.train.config import Config, ModelConfig, SampleConfig
    from gnnpar.train.minibatch import MinibatchEngine

    ctx = init()
    gc.collect()
    start = _reset_peak()
    graph = DistGraph.load(part_dir, ctx)
    sizes = global_split_sizes(graph, ctx)
    # The exchange path: what a rank holds on its own (ranks on one machine also map each
    # other's parts, pages the machine holds once: docs/memory.md).
    cfg = Config(model=ModelConfig(hidden=HIDDEN),
                 sample=SampleConfig(fanouts=FANOUTS, batch_size=BATCH, prefetch=False,
                                     peer_reads=False))
    torch.manual_seed(0)
    model = build_model(cfg.model, graph.meta.feat_dim, graph.meta.num_classes)
    engine = MinibatchEngine(cfg, graph, ParallelDims(ctx), model, sizes,
                             CommStats())
    batch_nodes = batch_edges = 0
    for _, batch in zip(range(BATCHES), engine.loader, strict=False):
        loss = F.cross_entropy(forward_batch(engine.module, batch),
                               batch.y[: batch.batch_size], reduction="sum")
        loss.backward()
        batch_nodes = max(batch_nodes, batch.n_id.numel())
        batch_edges = max(batch_edges, batch.edge_index.size(1))
    held = tensor_bytes(graph, engine)
    num_sent = HaloPlan.build(graph, ctx).send_idx.numel()
    loaders = [engine.loader, *engine.eval_loaders.values()]
    full_neighbour_accuracy(model, graph, ctx, sizes, budget_bytes=BUDGET)
    peak = _status("VmHWM") - start
    return {"held": held, "peak": peak, "num_owned": graph.num_owned,
            "num_halo": graph.num_halo, "num_edges": int(graph.indptr[graph.num_owned]),
            "num_stored_edges": graph.indices.numel(), "num_nodes": graph.meta.num_nodes,
            "num_sent": num_sent, "num_seeds": sum(ld.seeds.gids.numel() for ld in loaders),
            "num_params": sum(p.numel() for p in model.parameters()),
            "batch_nodes": batch_nodes, "batch_edges": batch_edges,
            "adjacency_copies": len({id(ld.sampler.graph) for ld in loaders}),
            "sampler_is_graph": engine.loader.sampler.graph is graph}


def memory_worker(warmup_dir: str, part_dirs: list[str]) -> list[dict[str, Any]]:
    """:func:`measure` each of ``part_dirs`` after one warm-up run (collective)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 1 << 17)  # M_MMAP_THRESHOLD fixed: big blocks go back on free
    libc.mallopt(-1, 1 << 17)  # M_TRIM_THRESHOLD
    measure(warmup_dir)  # the first run pays for lazy initialisation (kernels, threads)
    out = []
    for d in part_dirs:
        gc.collect()
        out.append(measure(d))
    return out
