"""Layer-wise inference in chunks equals single-process PyG on the whole graph.

Read from the grouped runs of ``conftest.nn_run`` (1, 2 and 4 ranks, two partitioned
graphs): every model of ``nn_cases.GNNS`` — each path of :mod:`gnnpar.nn.inference` —
under a budget of one row per chunk, a few rows, and the whole part, against PyG's own
forward on the whole graph; one halo exchange per layer whatever the chunking.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from gnnpar.partition.config import PartitionConfig
from tests.helpers import nn_cases as cases

GRAPHS = ("directed", "feedforward")


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("kind", cases.GNNS)
def test_chunked_inference_equals_whole_graph_pyg(nn_run: dict[str, Any], graph: str,
                                                  kind: str) -> None:
    ref = cases.gnn_reference(nn_run["datasets"][graph], kind).numpy()
    for rank, res in enumerate(nn_run["ranks"]):
        got, orig = res["inference"][graph]["runs"], res["inference"][graph]["orig_ids"]
        for budget in cases.BUDGETS:
            out = got[f"{kind}/{budget}"]["out"]
            assert out.shape == (len(orig), cases.CLASSES)
            diff = np.abs(out - ref[orig]).max(initial=0.0)
            assert diff <= 1e-9, f"{graph} {kind} budget {budget} rank {rank}: {diff}"


@pytest.mark.parametrize("graph", GRAPHS)
def test_one_halo_exchange_per_layer_whatever_the_chunks(nn_run: dict[str, Any],
                                                         graph: str) -> None:
    dataset = nn_run["datasets"][graph]
    for res in nn_run["ranks"]:
        # The halo, from the graph itself: sources of the edges into this rank's nodes
        # that another rank owns.
        owned = np.isin(np.arange(dataset.num_nodes), res["inference"][graph]["orig_ids"])
        halo = np.unique(dataset.src[owned[dataset.dst] & ~owned[dataset.src]])
        runs = res["inference"][graph]["runs"]
        for kind in cases.GNNS:
            for budget in cases.BUDGETS:
                halo_stats = runs[f"{kind}/{budget}"]["stats"].get("halo", {})
                calls, rows = halo_stats.get("calls", 0), halo_stats.get("rows_recv", 0)
                want = (cases.LAYERS, cases.LAYERS * len(halo))  # 1 rank: 3 empty ones
                assert (calls, rows) == want, (kind, budget, calls, rows, want)


def test_chunk_bounds_fit_the_budget() -> None:
    from gnnpar.nn.inference import chunk_bounds

    indptr = torch.tensor([0, 3, 3, 10, 11, 11, 30, 31])  # degrees 3 0 7 1 0 19 1
    bounds = chunk_bounds(indptr, edge_bytes=10, row_bytes=1, budget=40)
    assert bounds[0] == 0 and bounds[-1] == 7

    def cost(lo: int, hi: int) -> int:
        return int(indptr[hi] - indptr[lo]) * 10 + hi - lo

    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        assert cost(lo, hi) <= 40 or hi - lo == 1  # node 5 alone exceeds the budget
        assert hi == 7 or cost(lo, hi + 1) > 40  # as long as the budget allows
    assert chunk_bounds(indptr[:1], 10, 1, 40) == [0]  # no rows, no chunk


def _peak_allocated(fn: Any, *args: Any) -> tuple[Any, int]:
    """``fn(*args)``, and the most bytes torch's CPU allocator held at once inside it
    above what it held before."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn(*args)
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return out, peak


@pytest.mark.parametrize("kind", cases.GNNS)
def test_a_layer_allocates_its_output_and_one_chunk_budget(tmp_path: Any, kind: str) -> None:
    import gnnpar.distributed as gdist
    from gnnpar.datasets.synthetic import sbm
    from gnnpar.nn.inference import _Layerwise, _plain
    from gnnpar.partition.writer import partition_graph
    from gnnpar.storage.graph import DistGraph

    partition_graph(sbm(num_nodes=3000, avg_degree=20, feat_dim=cases.FEAT, seed=0),
                    tmp_path / "p", PartitionConfig(num_parts=1))
    started = not torch.distributed.is_initialized()
    ctx = gdist.init()
    try:
        run = _Layerwise(DistGraph.load(tmp_path / "p", ctx), ctx, 1 << 18, None)
        x = torch.randn(run.chunks.num_owned, cases.FEAT)
        with torch.no_grad():
            for layer in cases.make_gnn(kind).float().convs:
                conv = _plain(layer)
                x_all = run.local_rows(conv, x)
                x, peak = _peak_allocated(run.layer, conv, x_all, x.size(1))
                assert peak <= x.numel() * x.element_size() + run.budget, (kind, peak)
    finally:
        if started:
            gdist.shutdown()
