"""The final figures of a homogeneous node-classification run, as ``--eval`` asks.

``full``: layer-wise full-neighbour inference of the trained model on the whole
partitioned graph (:func:`~gnnpar.evaluation.node.full_neighbour_accuracy`), the same
inference writing its rows where ``--save-predictions`` / ``--save-embeddings`` ask
(:func:`~gnnpar.train.outputs.write_node_outputs`); ``sampled``: the last evaluation's
figures; ``none``: none.  The minibatch and full-graph engines' ``final_metrics``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor, nn
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpar.comm import CommStats
from gnnpar.distributed import DistContext
from gnnpar.evaluation.node import full_neighbour_accuracy
from gnnpar.nn.dist_conv import flush_pipelines
from gnnpar.nn.halo import HaloPlan
from gnnpar.storage.graph import DistGraph
from gnnpar.train.config import Config
from gnnpar.train.engine import FINAL_FIELDS, recorded_final
from gnnpar.train.outputs import write_node_outputs


def node_final_metrics(cfg: Config, module: nn.Module, model: BasicGNN, graph: DistGraph,
                       ctx: DistContext, num_global: dict[str, int], stats: CommStats,
                       last: dict[str, Any], outputs: Path | None, source: dict[str, Any],
                       plan: HaloPlan | None = None, x: Tensor | None = None
                       ) -> dict[str, Any]:
    """The final figures of ``model`` (collective where it infers).

    Args:
        cfg: The run's settings (``--eval``, the precision, the inference budget).
        module: The trained module (its pipelined halo exchanges are flushed first).
        model: The PyG model it runs.
        graph: This rank's part.
        ctx: Distributed context.
        num_global: Global size of each split.
        stats: Byte counters of the inference.
        last: The last epoch's record entry.
        outputs: Where to write the rows, or ``None``.
        source: The outputs' origin, for their index.
        plan: The halo routing, if already built.
        x: The owned nodes' learnt input rows (a graph without features).
    """
    t = cfg.train
    if t.eval != "full" and outputs is None:
        return recorded_final(t.eval, last)
    flush_pipelines(module)  # no stale halo exchange left in flight
    if outputs is not None:
        exact = write_node_outputs(outputs, cfg, model, graph, ctx, stats, plan, x,
                                   source=source)
    else:
        exact = full_neighbour_accuracy(model, graph, ctx, num_global, stats, t.precision,
                                        int(t.eval_budget_mb * 2**20), plan, x)
    if t.eval != "full":
        return recorded_final(t.eval, last)
    return {**dict.fromkeys(FINAL_FIELDS), **(exact or {})}
