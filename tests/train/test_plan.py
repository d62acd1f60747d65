"""The GNN planner (``gnnpar-train --plan``) against measured runs.

The plan of a 2-part graph is checked against the records of two real runs on 2 gloo
ranks: the strategy it chooses and the best full-graph strategy it rejects.  Bytes per
epoch must equal the records kind by kind; memory must be within 25% of the measured
rise of the largest rank's resident memory over its Trainer's start.  The runs set
``MALLOC_MMAP_THRESHOLD_`` so that glibc returns freed tensors to the system (by default
it raises the threshold to 32 MB and keeps freed blocks, and RSS then measures the
allocator's history rather than the tensors the run holds).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gnnpar.datasets.synthetic import sbm
from gnnpar.errors import ConfigError
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import PartitionMeta
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc
from gnnpar.train.cli import main
from gnnpar.train.config import Config, ModelConfig, RunConfig, SampleConfig
from gnnpar.train.plan import GraphStats, Plan, plan

MODEL = ModelConfig(name="sage", hidden=256)
ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}


def _run(part_dir: str, out: str, grid: str | None) -> dict[str, Any]:
    from gnnpar.distributed import init
    from gnnpar.train.config import FullConfig, TrainConfig
    from gnnpar.train.trainer import Trainer

    cfg = Config(model=MODEL, train=TrainConfig(mode="full", epochs=3),
                 full=FullConfig(grid=grid), run=RunConfig(out=out, progress=False))
    return Trainer(cfg, part_dir, init()).fit()


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("plan")
    graph = sbm(num_nodes=16000, feat_dim=256, num_classes=8, seed=3)
    partition_graph(graph, root / "parts",
                    PartitionConfig(num_parts=2, partitioner="random", seed=0))
    stats = GraphStats.from_meta(PartitionMeta.load(root / "parts"))
    p = plan(stats, MODEL, SampleConfig())
    assert p.chosen is not None
    rejected = min((e for e in p.estimates if e.exact and e is not p.chosen),
                   key=lambda e: e.epoch_cost_s)
    runs = {}
    with pytest.MonkeyPatch.context() as env:  # read by glibc as a process starts
        for key, value in ENV.items():
            env.setenv(key, value)
        for e in (p.chosen, rejected):
            grid = e.name.split()[1] if e.name.startswith("full-3d") else None
            runs[e.name] = run_multiproc(_run, 2, str(root / "parts"), str(
                root / e.name.replace(" ", "-")), grid, timeout=300)[0]
    return {"plan": p, "stats": stats, "runs": runs, "root": root}


def test_bytes_equal_the_records(planned: dict[str, Any]) -> None:
    p: Plan = planned["plan"]
    assert p.chosen is not None and p.chosen.exact  # no budget: an exact strategy
    for name, summary in planned["runs"].items():
        est = next(e for e in p.estimates if e.name == name)
        measured = {k: v["bytes"] for k, v in summary["comm_per_epoch"].items()}
        kinds = set(measured) | {k for k, v in est.bytes_by_kind.items() if v}
        assert {k: est.bytes_by_kind.get(k, 0) for k in kinds} == {
            k: measured.get(k, 0) for k in kinds}, name
        assert sum(measured.values()) > 0


def test_memory_within_a_quarter_of_the_peak(planned: dict[str, Any]) -> None:
    p: Plan = planned["plan"]
    ratios = {}
    for name, summary in planned["runs"].items():
        est = next(e for e in p.estimates if e.name == name).memory_bytes
        ratios[name] = est / summary["peak_memory_bytes"]["host_growth"]
    assert all(0.75 <= r <= 1.25 for r in ratios.values()), ratios


def test_budget_and_speeds_change_the_choice(planned: dict[str, Any]) -> None:
    stats: GraphStats = planned["stats"]
    small = SampleConfig(fanouts=(5, 5), batch_size=64)  # batches far below the graph
    p = plan(stats, MODEL, small)
    sampled = next(e for e in p.estimates if e.name == "sample")
    full = min(e.memory_bytes for e in p.estimates if e.exact)
    assert sampled.memory_bytes < full  # else this graph cannot test the fallback
    tight = plan(stats, MODEL, small, budget_bytes=(sampled.memory_bytes + full) // 2)
    assert tight.chosen is not None and tight.chosen.name == "sample"
    assert all(not e.fits for e in tight.estimates if e.exact)
    assert plan(stats, MODEL, small, budget_bytes=1).chosen is None
    slow = plan(stats, MODEL, small, speeds=[1.0, 0.25])
    for a, b in zip(p.estimates, slow.estimates, strict=True):
        assert b.epoch_cost_s > a.epoch_cost_s and b.bytes_by_kind == a.bytes_by_kind
    with pytest.raises(ConfigError, match="2 positive numbers"):
        plan(stats, MODEL, SampleConfig(), speeds=[1.0])
    with pytest.raises(ConfigError, match="--model gcn or --model sage"):
        plan(stats, dataclasses.replace(MODEL, name="gat"), SampleConfig())


def test_cli_prints_the_table_and_trains_nothing(planned: dict[str, Any],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root: Path = planned["root"]
    out = root / "cli-run"
    assert main([str(root / "parts"), "--plan", "--model", "sage", "--hidden", "256",
                 "--plan-memory-gb", "8", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "full-1d" in text and "full-3d 2,1,1" in text and "sample" in text
    assert f"chosen (8.00 GB/rank): {planned['plan'].chosen.name}" in text
    assert not out.exists()
    assert main([str(root / "parts"), "--plan", "--plan-speeds", "1,0"]) == 1
    assert "--plan-speeds" in capsys.readouterr().err


def test_choice_prefers_fewer_bytes_within_the_margin(planned: dict[str, Any]) -> None:
    from gnnpar.train.plan import PLAN_MARGIN

    p: Plan = planned["plan"]
    exact = [e for e in p.estimates if e.exact]
    frugal = min(exact, key=lambda e: e.bytes_per_epoch)
    assert p.chosen is not None and p.reason
    assert p.chosen is frugal or p.chosen.epoch_cost_s < (1 - PLAN_MARGIN) * frugal.epoch_cost_s


@pytest.mark.parametrize("margin,chosen", [(0.0, "c"), (0.2, "c"), (0.4, "a")])
def test_choose_rule_on_hand_checked_candidates(margin: float, chosen: str) -> None:
    """The one rule both planners choose by: a (10 bytes, 1.0 s), b (30, 0.85), c (50, 0.7).

    c is 30% faster than a, the fewest bytes: chosen unless the margin exceeds 30%; b (15%
    faster) is never the choice, as the fastest beats it.
    """
    from gnnpar.cost import choose

    cands = {"a": (10, 1.0), "b": (30, 0.85), "c": (50, 0.7)}
    got, why = choose(list(cands), lambda c: cands[c][1], lambda c: cands[c][0], margin)
    assert got == chosen
    assert ("faster than a" in why) == (chosen != "a")
    tie, _ = choose(["x", "y"], lambda c: 1.0, lambda c: {"x": 5, "y": 3}[c], 0.0)
    assert tie == "y"  # equal times: the fewer bytes


def test_rmat_hubs_bytes_exact_and_memory_within_a_quarter(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A power-law graph (R-MAT: hubs, METIS parts), not the SBM the model was fitted on."""
    from gnnpar.datasets.synthetic import rmat

    root = tmp_path_factory.mktemp("plan-rmat")
    partition_graph(rmat(num_nodes=16000, avg_degree=12, feat_dim=256, num_classes=8, seed=3),
                    root / "parts", PartitionConfig(num_parts=2))
    p = plan(GraphStats.from_meta(PartitionMeta.load(root / "parts")), MODEL, SampleConfig())
    est = next(e for e in p.estimates if e.name == "full-1d")
    with pytest.MonkeyPatch.context() as env:
        for key, value in ENV.items():
            env.setenv(key, value)
        summary = run_multiproc(_run, 2, str(root / "parts"), str(root / "run"), None,
                                timeout=300)[0]
    measured = {k: v["bytes"] for k, v in summary["comm_per_epoch"].items()}
    assert {k: v for k, v in est.bytes_by_kind.items() if v} == measured
    grown = summary["peak_memory_bytes"]["host_growth"]
    assert abs(est.memory_bytes - grown) <= 0.25 * grown, (est.memory_bytes, grown)
