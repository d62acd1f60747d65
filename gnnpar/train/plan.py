"""Which strategy trains a partitioned graph: memory, bytes and step cost per rank.

``gnnpar-train --plan`` reads the partition's metadata (nodes, edges, each part's owned,
halo and stored edge counts, feature width), the model (layers, hidden width), the
fan-outs, the world size, a per-rank memory budget (``--plan-memory-gb``) and, for
machines of unequal speed, each rank's relative speed (``--plan-speeds``), and estimates
for each strategy -- sampled minibatches, full-graph 1D (halo exchange) and full-graph
3D at every grid ``X*Y*Z = world`` -- per rank:

* **bytes per epoch**, all ranks together as the run record counts them
  (``comm_per_epoch``).  The full-graph figures are exact, from the same arithmetic as
  the layers: 1D exchanges each part's halo rows at every layer (GCN after its linear
  map, at the output width; GraphSAGE before, at the input width), their gradients where
  the exchanged rows need one (not GraphSAGE's input features), and DDP's ring
  all-reduce of the parameters; 3D runs the collectives of :mod:`gnnpar.nn.grid` on the
  block sizes of :class:`~gnnpar.nn.grid.GridShape`, padding included.  The sampled
  figure is an expected value: the sampled nodes of a batch (fan-outs, without
  duplicates) times the share of cut edges, at the feature width;
* **memory**: the tensors the mode holds -- the part's arrays, features, adjacency,
  parameters with their gradients and Adam's two moments, the activations autograd keeps
  -- the largest rank's (3D's adjacency blocks are assumed to hold ``E / (O D)`` edges);
* **step cost**: an epoch's multiply-adds and bytes through a :class:`~gnnpar.cost.HardwareModel`,
  divided by each rank's speed, the slowest rank's: a ranking, not a forecast.

:func:`plan` picks among the exact (full-graph) strategies that fit the budget, else
the sampled one: the one that moves the fewest bytes per epoch, unless another's
estimated epoch cost is lower by more than :data:`PLAN_MARGIN` (the cost model counts
multiply-adds and bytes only; a small estimated gain does not pay for many more bytes,
whose cost grows on slower networks).  Mixed precision is not modelled (fp32 throughout).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gnnpar.comm import ring_bytes
from gnnpar.cost import HardwareModel, choose
from gnnpar.errors import ConfigError
from gnnpar.nn.grid import ROTATIONS, GridShape, chunk_sizes
from gnnpar.nn.sparse import index_dtype
from gnnpar.partition.format import PartitionMeta
from gnnpar.train.config import Config, ModelConfig, SampleConfig

F32 = 4
FEATURE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


@dataclass(frozen=True)
class PartStats:
    """One part's sizes from ``meta.json``: owned and halo nodes, stored in-edges, seeds."""

    owned: int
    halo: int
    edges: int
    train: int


@dataclass(frozen=True)
class GraphStats:
    """What the planner knows of a partitioned graph (no array is read).

    Attributes:
        num_nodes: Nodes.
        num_edges: Directed edges.
        feat_dim: Feature width.
        feat_bytes: Bytes of one stored feature value.
        num_classes: Classes.
        cut_share: Share of edges whose endpoints lie in different parts.
        parts: Each part's sizes.
    """

    num_nodes: int
    num_edges: int
    feat_dim: int
    feat_bytes: int
    num_classes: int
    cut_share: float
    parts: tuple[PartStats, ...]

    @classmethod
    def from_meta(cls, meta: PartitionMeta) -> GraphStats:
        """The statistics of a partition (``meta.json``)."""
        train = meta.quality.get("per_part", {}).get("train") or [0] * meta.num_parts
        parts = tuple(PartStats(int(p["num_owned"]), int(p["num_halo"]), int(p["num_edges"]),
                                int(t)) for p, t in zip(meta.parts, train, strict=True))
        if not parts:
            raise ConfigError("the partition's meta.json lists no per-part sizes.",
                              field="parts", fix="re-create it with gnnpar-partition.")
        return cls(meta.num_nodes, meta.num_edges, meta.feat_dim,
                   FEATURE_BYTES.get(meta.feature_dtype, 4), meta.num_classes,
                   float(meta.quality.get("edge_cut_share", 1.0)), parts)


@dataclass
class Estimate:
    """One strategy's estimated cost.

    Attributes:
        name: ``sample``, ``full-1d`` or ``full-3d X,Y,Z``.
        flags: The ``gnnpar-train`` flags that run it.
        memory_bytes: The largest rank's memory.
        bytes_by_kind: Bytes per epoch, all ranks, by the record's kinds.
        epoch_cost_s: The slowest rank's epoch under the hardware model.
        exact: Full-graph (the exact gradient) rather than sampled.
        detail: Degrees and cache sizes, for the table.
        fits: Within the memory budget.
    """

    name: str
    flags: str
    memory_bytes: int
    bytes_by_kind: dict[str, int]
    epoch_cost_s: float
    exact: bool
    detail: str = ""
    fits: bool = True

    @property
    def bytes_per_epoch(self) -> int:
        """Bytes per epoch over every kind."""
        return sum(self.bytes_by_kind.values())


PLAN_MARGIN = 0.2
"""How much lower (a share) a strategy's estimated epoch cost must be to be chosen over
the one that moves the fewest bytes."""


@dataclass
class Plan:
    """Every strategy's estimate, the one chosen (``None``: nothing fits), and why."""

    estimates: list[Estimate]
    chosen: Estimate | None
    budget_bytes: int | None
    reason: str = ""


def widths_of(stats: GraphStats, model: ModelConfig) -> tuple[int, ...]:
    """Input width of every layer, then the output width."""
    return (stats.feat_dim, *[model.hidden] * (model.layers - 1), stats.num_classes)


def num_ops(model: ModelConfig) -> int:
    """Linear maps per layer: GCN one, GraphSAGE two (neighbours and root)."""
    if model.name not in ("gcn", "sage"):
        raise ConfigError(f"the planner models GCN and GraphSAGE, not {model.name}.",
                          field="model.name", fix="pass --model gcn or --model sage with --plan.")
    return 1 if model.name == "gcn" else 2


def param_count(widths: Sequence[int], ops: int) -> int:
    """Parameters of the model: ``ops`` weights and one bias per layer."""
    return sum(ops * a * b + b for a, b in zip(widths[:-1], widths[1:], strict=False))


def _ring(numel: int, group: int, collective: str) -> int:
    """Bytes one rank sends in a ring ``collective`` of ``numel`` fp32 values, as counted."""
    return round(ring_bytes(numel, group, collective)) * F32 if group > 1 else 0


def _speeds(speeds: Sequence[float] | None, world: int) -> list[float]:
    if speeds is None:
        return [1.0] * world
    if len(speeds) != world or min(speeds) <= 0:
        raise ConfigError(f"{len(speeds)} rank speeds for {world} ranks.",
                          field="run.plan_speeds",
                          fix=f"pass --plan-speeds with {world} positive numbers.")
    return list(speeds)


def held_bytes(p: PartStats, feat_dim: int, feat_bytes: int) -> int:
    """What a rank holds of its part for the whole run (``docs/memory.md``, "Held").

    The adjacency (``8 e + 25 (n_o + n_h) + 8 n_h``), the memory-mapped features and
    labels (``n_o (s_F F + 8)``) and the seeds with an epoch's order (``16 n_o``).
    """
    n, h = p.owned, p.halo
    return 8 * p.edges + 25 * (n + h) + 8 * h + n * (feat_bytes * feat_dim + 8) + 16 * n


def inference_bytes(p: PartStats, widths: Sequence[int], budget: int) -> int:
    """Final full-neighbour inference, layer by layer in chunks (``docs/memory.md``).

    ``F_max (2 n_o + n_h + S) + chunk + 8 S + 16 n_o``, the rows sent ``S`` taken as the
    halo (a part sends about as many rows as it receives), the chunk the whole part's
    cost or the budget, whichever is less.
    """
    n, h, wide = p.owned, p.halo, max(widths)
    chunk = max(48 * p.edges + n * (16 + 3 * F32 * (a + b))
                for a, b in zip(widths[:-1], widths[1:], strict=False))
    return F32 * wide * (2 * n + 2 * h) + min(budget, chunk) + 8 * h + 16 * n


def adjacency_bytes(nnz: int, rows: int, cols: int) -> int:
    """A :class:`~gnnpar.nn.sparse.SparseAdjacency` with its transpose.

    Its edges (source and destination ids of ``i`` bytes, fp32 weights), the CSR matrix
    (its row pointer; columns and values are the edges' own) and the transposed CSR
    (row pointer, destination ids and weights in source order); ``i`` is 4 when the
    sizes fit int32 (:func:`~gnnpar.nn.sparse.index_dtype`), else 8.
    """
    i = index_dtype(rows, cols, nnz).itemsize
    return (2 * i + F32) * nnz + i * (rows + 1) + i * (cols + 1) + (i + F32) * nnz


EVAL_BUDGET = 64 * 2**20
"""The final inference's chunk budget unless the run sets another (``--eval-budget-mb``)."""

RUNTIME_BYTES = 24 * 2**20
"""What a rank allocates once whatever the graph: allocator arenas, communication buffers,
autograd's threads (23-26 MB measured on a CPU rank training a 2,000-node graph)."""


@dataclass(frozen=True)
class LayerMemory:
    """Bytes of one layer's tensors in a training step (one rank).

    Attributes:
        live_in: Its input while the layer runs, when nothing else holds it.
        forward: What the forward pass holds at its largest (saved tensors included).
        saved: What autograd keeps from the forward until this layer's backward.
        backward: What the layer's backward holds at its largest (its gradients).
    """

    live_in: int
    forward: int
    saved: int
    backward: int


def peak_bytes(persistent: int, layers: Sequence[LayerMemory]) -> int:
    """A training step's peak: what stays, plus the largest moment of the step.

    In the forward pass of layer ``j`` the saved tensors of the layers before it are held,
    and its input and working set; in its backward, those of the layers before it and its
    gradients (its own saved tensors are released as its backward consumes them).
    """
    peak, before = 0, 0
    for m in layers:
        peak = max(peak, before + m.live_in + m.forward, before + m.backward)
        before += m.saved
    return RUNTIME_BYTES + persistent + peak


def layer_memory(ops: int, n: int, h: int, a: int, b: int, hidden: bool, grad_in: bool,
                 exchanged: bool = True) -> LayerMemory:
    """Element counts of one GraphSAGE (``ops == 2``) or GCN layer on ``n`` destination rows.

    Args:
        ops: Linear maps of the layer.
        n: Rows it computes.
        h: Further source rows: the halo of a 1D layer, the next hop of a sampled one.
        a: Input width.
        b: Output width.
        hidden: Followed by ReLU and dropout, one pass (kept: their output only).
        grad_in: Whether its input needs a gradient (not the features).
        exchanged: Whether the source rows are assembled for the layer (1D's halo
            exchange: the rows sent and the input with halo) or are its input (sampled).
    """
    keep = n * b if hidden else 0
    if ops == 2:  # the input with halo, [mean | root] (one product; kept), the output
        return LayerMemory(
            n * a * grad_in, (n + h) * a * exchanged + 2 * n * a + n * b,
            2 * n * a + keep, 2 * n * a + n * b + ((n + h) * a + h * a) * grad_in)
    # lin(x) (x kept) over the sources, the halo rows sent and the rows with halo, the sum
    return LayerMemory(
        0, n * b + h * b + (n + h) * b * exchanged + n * b, n * a * grad_in + keep,
        n * b + (n + h) * b + h * b + n * b + n * a * grad_in)


def _f32(m: LayerMemory) -> LayerMemory:
    """Element counts as fp32 bytes."""
    return LayerMemory(F32 * m.live_in, F32 * m.forward, F32 * m.saved, F32 * m.backward)


def estimate_full_1d(stats: GraphStats, model: ModelConfig, hw: HardwareModel,
                     speeds: Sequence[float], eval_budget: int = EVAL_BUDGET) -> Estimate:
    """Full-graph training with halo exchange (``--mode full``), one part per rank."""
    ops, widths, world = num_ops(model), widths_of(stats, model), len(stats.parts)
    layers = range(len(widths) - 1)
    # GCN exchanges after its linear map; GraphSAGE its input rows (no gradient at layer 0).
    exchanged = [widths[j + 1] if ops == 1 else widths[j] for j in layers]
    grad_layers = [j for j in layers if ops == 1 or j > 0]
    halo = sum(p.halo for p in stats.parts)
    params = param_count(widths, ops)
    grad = world * _ring(params, world, "all_reduce")
    kinds = {"halo": halo * sum(exchanged) * F32,
             "halo_grad": halo * sum(exchanged[j] for j in grad_layers) * F32, "grad": grad}
    memory, cost = [], []
    for p, speed in zip(stats.parts, speeds, strict=True):
        n, h, e = p.owned, p.halo, p.edges
        mem = [layer_memory(ops, n, h, widths[j], widths[j + 1], j < len(widths) - 2, j > 0)
               for j in layers]
        persistent = (held_bytes(p, stats.feat_dim, stats.feat_bytes)
                      + F32 * n * stats.feat_dim + 16 * e + adjacency_bytes(e + n, n, n + h)
                      + 20 * params)
        memory.append(max(peak_bytes(persistent, [_f32(m) for m in mem]), RUNTIME_BYTES
                          + persistent + inference_bytes(p, widths, eval_budget)))
        flops = 3 * sum(2 * e * exchanged[j] + 2 * n * widths[j] * widths[j + 1] * ops
                        for j in layers)
        sent = h * (sum(exchanged) + sum(exchanged[j] for j in grad_layers)) * F32 + grad / world
        cost.append(hw.seconds(flops, sent, speed))
    return Estimate("full-1d", "--mode full", max(memory), kinds, max(cost), True,
                    f"dp={world}, halo {halo:,} rows")


def grid_bytes(shape: GridShape, ops: int) -> dict[str, int]:
    """Bytes per epoch of 3D training on ``shape``, all ranks, as the layers count them."""
    kinds = {"grid": 0, "grid_grad": 0, "grad": 0}
    world = math.prod(shape.dims)
    for rank in range(world):
        c = shape.coords_of(rank)
        for layer in range(shape.layers):
            fwd, bwd, grad = _layer_bytes(shape, layer, c, ops)
            kinds["grid"] += fwd
            kinds["grid_grad"] += bwd
            kinds["grad"] += grad
        o_last = ROTATIONS[(shape.layers - 1) % 3][0]
        classes = chunk_sizes(shape.widths[-1], shape.dims[o_last])
        lo, hi = shape.rows(shape.layers - 1, c, output=True)
        kinds["grid"] += _ring(shape.dims[o_last] * max(classes) * (hi - lo),
                               shape.dims[o_last], "all_gather")
    return kinds


def _layer_bytes(shape: GridShape, layer: int, c: tuple[int, int, int], ops: int
                 ) -> tuple[int, int, int]:
    """One rank's forward, backward and parameter-gradient bytes of one layer."""
    o, i, d = ROTATIONS[layer % 3]
    big_o, big_i, big_d = shape.dims[o], shape.dims[i], shape.dims[d]
    lo, hi = shape.node_block(o, c[o])
    in_rows = chunk_sizes(hi - lo, big_d)
    lo, hi = shape.node_block(d, c[d])
    n_d, out_rows = hi - lo, chunk_sizes(hi - lo, big_i)
    a0, a1 = shape.cols(layer, c)
    b0, b1 = shape.cols(layer, c, output=True)
    a, b = a1 - a0, b1 - b0
    gather_h = _ring(big_d * max(in_rows) * a, big_d, "all_gather")
    reduce_p = _ring(n_d * ops * a, big_o, "all_reduce")
    weights = ops * _ring(big_d * max(chunk_sizes(a, big_d)) * b, big_d, "all_gather")
    scatter_q = _ring(big_i * max(out_rows) * b, big_i, "reduce_scatter")
    fwd = gather_h + reduce_p + weights + scatter_q
    # The input of layer 0 needs no gradient: no adjoint of its gather and its all-reduce.
    bwd = weights + scatter_q + (gather_h + reduce_p if layer > 0 else 0)
    grad = _ring(b, big_i, "all_reduce") + _ring(b, big_d, "all_reduce")
    return fwd, bwd, grad


def estimate_full_3d(stats: GraphStats, model: ModelConfig, dims: tuple[int, int, int],
                     hw: HardwareModel, speeds: Sequence[float]) -> Estimate:
    """3D-parallel full-graph training (``--grid X,Y,Z``)."""
    ops, widths = num_ops(model), widths_of(stats, model)
    shape = GridShape(dims, stats.num_nodes, widths)
    kinds = grid_bytes(shape, ops)
    world = math.prod(dims)
    per_rank = {k: v / world for k, v in kinds.items()}
    memory, cost = [], []
    for rank, speed in enumerate(speeds):
        c, part = shape.coords_of(rank), stats.parts[rank]
        lo, hi = shape.rows(0, c)
        a0, a1 = shape.cols(0, c)
        persistent = held_bytes(part, stats.feat_dim, stats.feat_bytes) + F32 * (
            (hi - lo) * (a1 - a0))
        mem, flops = [], 0.0
        for layer in range(shape.layers):
            o, i, d = ROTATIONS[layer % 3]
            rows, cols = shape.node_block(d, c[d]), shape.node_block(o, c[o])
            n_d, n_o = rows[1] - rows[0], cols[1] - cols[0]
            diagonal = max(0, min(rows[1], cols[1]) - max(rows[0], cols[0]))
            edges = stats.num_edges // (dims[o] * dims[d])
            a0, a1 = shape.cols(layer, c)
            b0, b1 = shape.cols(layer, c, output=True)
            a, b = a1 - a0, b1 - b0
            r0, r1 = shape.rows(layer, c)
            q0, q1 = shape.rows(layer, c, output=True)
            r_in, r_out = r1 - r0, q1 - q0
            if layer < 3:  # one adjacency block per rotation
                persistent += sum(adjacency_bytes(k, n_d, n_o) for k in (
                    [edges + diagonal] if ops == 1 else [edges, diagonal]))
            persistent += 16 * (ops * b * max(chunk_sizes(a, dims[d])) + b)
            keep = r_out * b + r_out * b // 4 if layer < shape.layers - 1 else 0
            grad_in = layer > 0
            gathered = n_o * a if dims[d] > 1 else 0
            mem.append(LayerMemory(
                r_in * a * grad_in,
                # gathered rows with [S_k H] and its sum over o; then that sum (kept),
                # the weights, the partial products and the output
                max(gathered + 2 * ops * n_d * a,
                    ops * n_d * a + ops * a * b + 2 * n_d * b + 2 * r_out * b),
                ops * n_d * a + ops * a * b + keep,
                r_out * b + n_d * b + ops * n_d * a
                + (ops * n_d * a + ops * n_o * a + gathered + r_in * a) * grad_in))
            flops += 3 * (2 * (edges + diagonal) * a + 2 * n_d * a * b * ops)
        memory.append(peak_bytes(persistent, [_f32(m) for m in mem]))
        cost.append(hw.seconds(flops, sum(per_rank.values()), speed))
    grid = ",".join(map(str, dims))
    return Estimate(f"full-3d {grid}", f"--mode full --grid {grid}", max(memory), kinds,
                    max(cost), True, f"grid {grid}")


def sampled_hops(stats: GraphStats, sample: SampleConfig) -> tuple[list[int], list[int]]:
    """Expected new nodes of each hop of a batch (seeds first) and sampled edges per hop.

    Each node of a hop draws ``min(k, mean in-degree)`` in-edges; ``m`` draws over the
    ``N`` nodes hit ``N (1 - exp(-m / N))`` distinct ones, of which the share not yet in
    the batch is new (sources taken as uniform: an upper estimate on graphs with locality).
    """
    n, degree = stats.num_nodes, stats.num_edges / max(stats.num_nodes, 1)
    hops, edges = [min(sample.batch_size, n)], []
    for k in sample.fanouts:
        draws = hops[-1] * min(float(k), degree)
        distinct = n * (1 - math.exp(-draws / n))
        hops.append(int(distinct * (1 - sum(hops) / n)))
        edges.append(int(draws))
    return hops, edges


def estimate_sampled(stats: GraphStats, model: ModelConfig, sample: SampleConfig,
                     hw: HardwareModel, speeds: Sequence[float], budget_bytes: int | None,
                     eval_budget: int = EVAL_BUDGET) -> Estimate:
    """Minibatches of sampled neighbourhoods (``--mode sample``); an expected value."""
    ops, widths, world = num_ops(model), widths_of(stats, model), len(stats.parts)
    params = param_count(widths, ops)
    steps = max(-(-p.train // sample.batch_size) for p in stats.parts)
    hops, edges = sampled_hops(stats, sample)
    nodes = sum(hops)
    remote = (nodes - hops[0]) * stats.cut_share
    step_bytes = remote * (stats.feat_dim * F32 + 8) + sum(hops[:-1]) * stats.cut_share * 8 * (
        1 + sum(sample.fanouts) / len(sample.fanouts))
    grad = _ring(params, world, "all_reduce")
    kinds = {"feature": int(world * steps * remote * stats.feat_dim * F32),
             "feature_ids": int(world * steps * remote * 8),
             "sample": int(world * steps * (step_bytes - remote * (stats.feat_dim * F32 + 8))),
             "grad": world * steps * grad}
    # A batch's ids, features (stored, and fp32 when stored narrower) and edges with the
    # sampler's bookkeeping (docs/memory.md: 128 per edge); two are alive (prefetch).
    feature = stats.feat_dim * (F32 + (stats.feat_bytes if stats.feat_bytes != F32 else 0))
    loaded = nodes * (16 + feature) + 128 * sum(edges)
    # Layer j computes the rows within L - 1 - j hops of the seeds (SampledGNN) from
    # those within L - j.
    layers = len(widths) - 1
    mem = [_f32(layer_memory(ops, sum(hops[: layers - j]), hops[layers - j], widths[j],
                             widths[j + 1], j < layers - 1, j > 0, exchanged=False))
           for j in range(layers)]
    memory, cost = [], []
    for p, speed in zip(stats.parts, speeds, strict=True):
        held = held_bytes(p, stats.feat_dim, stats.feat_bytes) + 20 * params + int(
            sample.cache_mb * 2**20)
        memory.append(max(peak_bytes(held + 2 * loaded, mem), RUNTIME_BYTES + held
                          + inference_bytes(p, widths, eval_budget)))
        flops = 3 * steps * sum(2 * hops[j] * widths[j] * widths[j + 1] * ops
                                + 2 * hops[j + 1] * widths[j]
                                for j in range(len(widths) - 1))
        cost.append(hw.seconds(flops, steps * (step_bytes + grad), speed))
    detail = f"dp={world}, tp=1, {steps} steps"
    cache = sample.cache_mb
    if budget_bytes is not None:
        room = (budget_bytes - max(memory)) // (stats.feat_dim * F32) + int(
            cache * 2**20) // (stats.feat_dim * F32)
        detail += f", cache up to {max(0, room):,} rows"
    return Estimate("sample", f"--mode sample --fanouts {','.join(map(str, sample.fanouts))}",
                    max(memory), kinds, max(cost), False, detail)


def grids(world: int) -> list[tuple[int, int, int]]:
    """Every ``(X, Y, Z)`` with ``X * Y * Z = world``."""
    return [(x, y, world // (x * y)) for x in range(1, world + 1) for y in range(1, world + 1)
            if world % (x * y) == 0]


def plan(stats: GraphStats, model: ModelConfig, sample: SampleConfig,
         budget_bytes: int | None = None, speeds: Sequence[float] | None = None,
         hw: HardwareModel | None = None, eval_budget: int = EVAL_BUDGET) -> Plan:
    """Estimate every strategy and choose one (see the module docstring).

    Args:
        stats: The partition (one part per rank).
        model: The model section (``gcn`` or ``sage``).
        sample: The sampled mode's settings (fan-outs, batch size, cache).
        budget_bytes: Memory per rank (``None``: unlimited).
        speeds: Relative speed of each rank (default: equal).
        hw: Throughput of a rank of speed 1.
        eval_budget: Chunk budget of the final full-neighbour inference.
    """
    hw = hw or HardwareModel()
    rank_speeds = _speeds(speeds, len(stats.parts))
    world = len(stats.parts)
    estimates = [estimate_full_1d(stats, model, hw, rank_speeds, eval_budget)]
    if world > 1:
        estimates += [estimate_full_3d(stats, model, g, hw, rank_speeds) for g in grids(world)]
    estimates.append(estimate_sampled(stats, model, sample, hw, rank_speeds, budget_bytes,
                                      eval_budget))
    for e in estimates:
        e.fits = budget_bytes is None or e.memory_bytes <= budget_bytes
    fitting = [e for e in estimates if e.fits]
    pool = [e for e in fitting if e.exact] or fitting  # the exact gradient first
    if not pool:
        return Plan(estimates, None, budget_bytes)
    chosen, why = choose(pool, lambda e: e.epoch_cost_s, lambda e: e.bytes_per_epoch,
                         PLAN_MARGIN, lambda e: e.name)
    return Plan(estimates, chosen, budget_bytes, why)


def format_plan(p: Plan) -> str:
    """The table ``gnnpar-train --plan`` prints, then the choice."""
    lines = [f"{'strategy':<16} {'memory/rank':>12} {'MB/epoch':>10} {'epoch cost':>11}  "
             f"{'fits':<4}  detail"]
    fastest = min(e.epoch_cost_s for e in p.estimates)
    for e in p.estimates:
        lines.append(f"{e.name:<16} {e.memory_bytes / 2**20:>10.1f}MB "
                     f"{e.bytes_per_epoch / 1e6:>10.1f} {e.epoch_cost_s / fastest:>10.2f}x  "
                     f"{'yes' if e.fits else 'no':<4}  {e.detail}")
    lines.append("memory: the tensors a rank holds at its peak; measured within 25% of the "
                 "peak rise of resident memory on SBM and R-MAT graphs with "
                 "MALLOC_MMAP_THRESHOLD_=65536 (glibc's default keeps freed blocks: RSS can "
                 "rise up to 3x higher)")
    budget = "no budget" if p.budget_bytes is None else f"{p.budget_bytes / 2**30:.2f} GB/rank"
    if p.chosen is None:
        lines.append(f"nothing fits in {budget}: more ranks, or a smaller model or batch.")
    else:
        lines.append(f"chosen ({budget}): {p.chosen.name} -- gnnpar-train {p.chosen.flags}")
        lines.append(f"  why: {p.reason}")
    return "\n".join(lines)


def plan_run(cfg: Config) -> str:
    """``gnnpar-train --plan``: partition as a run would, then the table and the choice.

    The world size is ``--nproc`` (or the parts of a partition directory).
    """
    from gnnpar.train.prepare import is_partition_dir, resolve_partition

    world = cfg.run.nproc
    if world is None and is_partition_dir(cfg.data.dataset):
        world = PartitionMeta.load(cfg.data.dataset).num_parts
    if world is None:
        raise ConfigError("--plan needs the number of ranks.", field="run.nproc",
                          fix="pass --nproc N with --plan (or a partition directory).")
    part_dir = resolve_partition(cfg, world, progress=cfg.run.progress)
    meta = PartitionMeta.load(part_dir)
    if meta.types is not None or meta.feat_dim == 0:
        what = "a typed graph" if meta.types is not None else "a graph without features"
        raise ConfigError(f"the partition is of {what}, which trains in sample mode only "
                          "(learnable embeddings); there is no strategy to choose, and the "
                          "planner's model counts neither types nor embeddings.",
                          path=part_dir, field="run.plan",
                          fix="drop --plan: the default flags train it.")
    stats = GraphStats.from_meta(meta)
    budget = None if cfg.run.plan_memory_gb is None else int(cfg.run.plan_memory_gb * 2**30)
    chosen = plan(stats, cfg.model, cfg.sample, budget, cfg.run.speeds(),
                  eval_budget=int(cfg.train.eval_budget_mb * 2**20))
    head = (f"{part_dir}: {stats.num_nodes:,} nodes, {stats.num_edges:,} edges, "
            f"{stats.feat_dim} features, {world} ranks; {cfg.model.name} "
            f"{cfg.model.layers}x{cfg.model.hidden}, fan-outs "
            f"{','.join(map(str, cfg.sample.fanouts))}, batch {cfg.sample.batch_size}")
    return head + "\n" + format_plan(chosen)
