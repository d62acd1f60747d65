"""Link prediction through the trainer (``--task link``), on real gloo ranks.

References: a single-process PyG model on the whole graph scored with
``ogb.linkproppred.Evaluator``, and a single-process full-batch PyG training loop with
``torch_geometric.utils.negative_sampling`` (``_reference.train_link_reference``), not
gnnpar's code.

Starting ranks costs more than these trainings, so every 2-rank run of the module is one
job of one spawned run (the ``two_ranks_link`` fixture).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.synthetic import rmat, sbm
from gnnpar.errors import ConfigError
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc
from gnnpar.testing.reference import converge_link_reference, train_link_reference
from gnnpar.train.config import Config
from gnnpar.train.record import EPOCH_FIELDS, SUMMARY_FIELDS
from tests.helpers.workers import Stop, _params, _tracer, configure, train  # noqa: F401 - a job

HIDDEN, LR, FANOUTS = 64, 0.01, (10, 10)


@pytest.fixture(scope="module")
def dataset() -> GraphDataset:
    return sbm(num_nodes=4096, seed=0, task="link")


@pytest.fixture(scope="module")
def parts(dataset: GraphDataset, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("linktrain")
    for k in (1, 2):
        partition_graph(dataset, root / f"p{k}", PartitionConfig(num_parts=k, seed=0))
    return {k: root / f"p{k}" for k in (1, 2)}


def link_config(out: str, **settings: Any) -> Config:
    base = {"task": "link", "fanouts": FANOUTS, "batch_size": 512, "epochs": 4, "lr": LR,
            "hidden": HIDDEN, "progress": False, "out": out, "eval_every": 100}
    return configure(Config(), **{**base, **settings})


def _fit(part_dir: str, out: str, settings: dict[str, Any]) -> dict[str, Any]:
    from gnnpar.distributed import init
    from gnnpar.train.trainer import Trainer

    ctx = init()
    trainer = Trainer(link_config(out, **settings), part_dir, ctx)
    summary = trainer.fit()
    return {"summary": summary, "record": trainer.record.to_dict()}


def _fit_runs(part_dir: str, root: str, runs: dict[str, dict[str, Any]]
              ) -> dict[str, dict[str, Any]]:
    """Several trainings one after another on the same ranks (one process group)."""
    return {name: _fit(part_dir, f"{root}/{name}", settings) for name, settings in runs.items()}


REFERENCE_PROTOCOL = {"fanouts": (1 << 30, 1 << 30), "batch_size": 1 << 30, "exclude": "none",
                      "dropout": 0.0, "num_neg": 1, "strict": True, "epochs": 30,
                      "checkpoint_every": 1000}
"""The full-batch reference's protocol in gnnpar's terms: every neighbour (fan-outs above
every degree), every training edge of a rank in its one step per epoch, the targets kept in
message passing, no dropout, one negative per positive that is not an edge."""


def _jobs(todo: dict[str, tuple[str, tuple[Any, ...]]]) -> dict[str, Any]:
    """Run several of this module's rank functions one after another on the same ranks
    (each calls ``init()``, which joins the process group once)."""
    return {name: globals()[fn](*args) for name, (fn, args) in todo.items()}


FIT_RUNS = {"default": {}, "reference": REFERENCE_PROTOCOL}


@pytest.fixture(scope="module")
def two_ranks_link(parts: dict[int, Path], tmp_path_factory: pytest.TempPathFactory
                   ) -> list[dict[str, Any]]:
    """Every rank's results of the module's 2-rank jobs: the default run and the reference
    protocol (``fit``), the untrained metrics, the resume scenario, the hub-heavy graph."""
    root = tmp_path_factory.mktemp("linkruns2")
    partition_graph(hub_graph(), root / "hub", PartitionConfig(num_parts=2, seed=0))
    hub = configure(Config(), task="link", epochs=20, out=str(root / "hub-run"),
                    progress=False, checkpoint_every=100)  # the defaults
    p2 = str(parts[2])
    todo = {"fit": ("_fit_runs", (p2, str(root / "r2"), FIT_RUNS)),
            "metrics": ("_metrics", (p2,)),
            "resume": ("_resume_runs", (p2, str(root / "resume"))),
            "hub": ("train", (str(root / "hub"), hub))}
    return run_multiproc(_jobs, 2, todo, timeout=600)


@pytest.fixture(scope="module")
def trained(parts: dict[int, Path], two_ranks_link: list[dict[str, Any]],
            tmp_path_factory: pytest.TempPathFactory
            ) -> dict[int, list[dict[str, dict[str, Any]]]]:
    """Per world size, every rank's results of the default run and of the reference protocol."""
    root = tmp_path_factory.mktemp("linkruns")
    return {1: run_multiproc(_fit_runs, 1, str(parts[1]), str(root / "r1"), FIT_RUNS,
                             timeout=600),
            2: [rank["fit"] for rank in two_ranks_link]}


def test_two_ranks_match_one_rank_and_pyg(dataset: GraphDataset,
                                          trained: dict[int, list[dict[str, Any]]]) -> None:
    one = trained[1][0]["default"]["summary"]
    two = [r["default"] for r in trained[2]]
    same = ("test_mrr", "val_mrr", "test_hits", "val_hits", "steps_per_epoch")
    assert [{k: r["summary"][k] for k in same} for r in two] == [
        {k: two[0]["summary"][k] for k in same}] * 2  # all-reduced figures
    reference = train_link_reference(dataset, 100, HIDDEN, LR)["evals"][-1]["test_mrr"]
    mrr1, mrr2 = one["test_mrr"], two[0]["summary"]["test_mrr"]
    # Far above random candidates (MRR ~0.05 for 100), and the three agree.
    assert reference > 0.25 and mrr1 > 0.25
    assert abs(mrr1 - mrr2) <= 0.02, (mrr1, mrr2)
    assert abs(mrr1 - reference) <= 0.02 and abs(mrr2 - reference) <= 0.02, (
        mrr1, mrr2, reference)
    record = two[0]["record"]
    assert set(record["summary"]) == set(SUMMARY_FIELDS)
    assert [set(e) for e in record["epochs"]] == [set(EPOCH_FIELDS)] * 4
    assert record["summary"]["task"] == "link" and record["epochs"][-1]["test_mrr"] == mrr2
    assert record["summary"]["val_acc"] is None and set(record["summary"]["test_hits"]) == {
        "hits@1", "hits@10", "hits@50", "hits@100"}


def test_reference_protocol_matches_full_batch_pyg(dataset: GraphDataset,
                                                   trained: dict[int, list[dict[str, Any]]]
                                                   ) -> None:
    """At the reference's protocol gnnpar is the full-batch PyG loop, negatives aside.

    Both start from the same weights (seed 0) and see the same positives; only the random
    negatives differ.  Measured on this graph (30-40 epochs): the reference's test MRR
    spreads over 0.002 between negative seeds, its epoch losses over up to 0.007; gnnpar
    at 1 and 2 ranks lies within 0.01 of the (seeded) reference at every epoch.
    """
    ref = train_link_reference(dataset, REFERENCE_PROTOCOL["epochs"], HIDDEN, LR)
    mrr = {}
    for k, ranks in trained.items():
        run = ranks[0]["reference"]
        losses = [e["train_loss"] for e in run["record"]["epochs"]]
        assert run["summary"]["steps_per_epoch"] == 1
        assert abs(losses[0] - ref["losses"][0]) <= 0.002, (k, losses[0], ref["losses"][0])
        assert np.abs(np.subtract(losses, ref["losses"])).max() <= 0.01, (k, losses, ref)
        mrr[k] = run["summary"]["test_mrr"]
    ref_mrr = ref["evals"][-1]["test_mrr"]
    assert ref_mrr > 0.25  # far above random candidates (~0.05)
    assert max(abs(m - ref_mrr) for m in mrr.values()) <= 0.01, (mrr, ref_mrr)
    assert abs(mrr[1] - mrr[2]) <= 0.01, mrr


def _metrics(part_dir: str) -> dict[str, Any]:
    """Untrained (seeded) encoder: link metrics of val and test, and the weights."""
    from gnnpar.distributed import init
    from gnnpar.evaluation.link import embeddings, link_metrics
    from gnnpar.models.link import LinkDecoder
    from gnnpar.models.node import build_model
    from gnnpar.storage.graph import DistGraph
    from gnnpar.train.config import ModelConfig

    ctx = init()
    graph = DistGraph.load(part_dir, ctx)
    torch.manual_seed(3)
    gnn = build_model(ModelConfig(hidden=16), graph.meta.feat_dim, 16)
    h = embeddings(gnn, graph, ctx, budget_bytes=1 << 16)
    out = link_metrics(h, LinkDecoder("dot", 16), graph, ctx, chunk=7)
    return {"metrics": out, "state": {k: v.numpy() for k, v in gnn.state_dict().items()}}


def test_link_metrics_equal_pyg_and_ogb(dataset: GraphDataset,
                                        two_ranks_link: list[dict[str, Any]]) -> None:
    from ogb.linkproppred import Evaluator
    from torch_geometric.nn.models import GraphSAGE

    results = [rank["metrics"] for rank in two_ranks_link]
    assert results[0]["metrics"] == results[1]["metrics"]
    model = GraphSAGE(dataset.feat_dim, 16, 2, 16)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in results[0]["state"].items()})
    model.eval()
    with torch.no_grad():
        h = model(torch.from_numpy(np.asarray(dataset.x)),
                  torch.from_numpy(np.stack([dataset.src, dataset.dst])))
    for split in ("val", "test"):
        pos = torch.from_numpy(getattr(dataset, f"{split}_edges"))
        neg = torch.from_numpy(getattr(dataset, f"{split}_neg"))
        ogb = Evaluator("ogbl-citation2").eval({
            "y_pred_pos": (h[pos[:, 0]] * h[pos[:, 1]]).sum(-1),
            "y_pred_neg": (h[pos[:, 0]][:, None] * h[neg]).sum(-1)})
        got = results[0]["metrics"]
        assert got[f"{split}_mrr"] == pytest.approx(float(ogb["mrr_list"].mean()), abs=1e-4)
        for k in (1, 10):
            assert got[f"{split}_hits@{k}"] == pytest.approx(
                float(ogb[f"hits@{k}_list"].mean()), abs=1e-4)


def _resume_runs(part_dir: str, out: str) -> dict[str, Any]:
    from gnnpar.distributed import init
    from gnnpar.train.trainer import Trainer

    ctx = init()
    cfg = link_config(f"{out}/full", epochs=2, checkpoint_steps=2, batch_size=256,
                      strict=True, num_neg=2)
    full_trace: list[tuple[int, int, int]] = []
    full = Trainer(cfg, part_dir, ctx)
    full.fit(_tracer(full_trace))
    run_cfg = configure(cfg, out=f"{out}/stopped")
    before: list[tuple[int, int, int]] = []
    try:
        Trainer(run_cfg, part_dir, ctx).fit(_tracer(before, (1, 4)))
    except Stop:
        pass
    after: list[tuple[int, int, int]] = []
    resumed = Trainer(configure(run_cfg, resume=True), part_dir, ctx)
    resumed.fit(_tracer(after))
    return {"full": full_trace, "before": before, "after": after,
            "params": (_params(full), _params(resumed)),
            "mrr": (full.record.summary["test_mrr"], resumed.record.summary["test_mrr"])}


def test_resume_mid_epoch_same_batches_and_weights(two_ranks_link: list[dict[str, Any]]
                                                   ) -> None:
    for rank in (r["resume"] for r in two_ranks_link):
        trace, at = rank["full"], [t[:2] for t in rank["full"]]
        assert rank["before"] == trace[:at.index((1, 4)) + 1]
        assert rank["after"] == trace[at.index((1, 4)):]  # newest checkpoint: after step 3
        full, resumed = rank["params"]
        for key, value in full.items():
            assert np.array_equal(resumed[key], value), key
        assert rank["mrr"][0] == rank["mrr"][1]


def hub_graph() -> GraphDataset:
    """A small power-law link task whose positives are hub-biased (R-MAT; seed 0).

    2,048 nodes, mean degree 10, largest 95; communities in noisy features (homophily
    0.9).  Measured (single-process full batch, 2x128, dot decoder, lr 0.005, trained
    until 10 evaluations 10 epochs apart bring no better validation MRR): a features-only
    MLP converges at test MRR 0.229 (best-valid epoch 620; after 400 epochs, the yardstick
    before issue 38, it was 0.215 and still rising), GraphSAGE at 0.433 (epoch 600).
    gnnpar, 2 ranks, the link defaults (lr 0.002 since issue 38; the real graphs of
    ``benchmarks/bench_link_accuracy.py`` gain 0.06-0.14 MRR over lr 0.005): best-valid
    test MRR 0.362 after 20 epochs (lr 0.005: 0.379, lr 0.001: 0.328, batch 1024: 0.267).
    """
    return rmat(num_nodes=2048, avg_degree=10, feat_dim=16, seed=0, a=0.7, b=0.12, c=0.12,
                homophily=0.9, feature_noise=3.0).random_link_split((0.85, 0.05, 0.1), seed=0)


def test_default_link_training_beats_features_only_on_a_hub_heavy_graph(
        two_ranks_link: list[dict[str, Any]]) -> None:
    """The link defaults take half of what message passing adds over the features alone,
    measured against references trained until they converge (issue 38: defaults tuned
    against a reference still rising sat at the features-only level)."""
    ds = hub_graph()
    deg = ds.in_degree()
    hubs = np.argsort(deg)[-len(deg) // 100:]  # the top 1% by degree
    assert np.isin(np.asarray(ds.test_edges), hubs).any(1).mean() > 0.15  # uniform: ~0.02
    refs = {enc: converge_link_reference(ds, encoder=enc) for enc in ("mlp", "sage")}
    for enc, ref in refs.items():
        assert ref["stop"] == "converged", (enc, ref["epochs"], ref["last_gain"])
    mlp, sage = (refs[enc]["best"]["test_mrr"] for enc in ("mlp", "sage"))
    assert sage >= mlp + 0.1, (sage, mlp)  # measured: 0.433 against 0.229
    # Trained with the link defaults (20 epochs) on 2 ranks: two_ranks_link's "hub" job,
    # its best-valid evaluation (OGB's protocol, as the references).
    summary = two_ranks_link[0]["hub"]["summary"]
    best = summary["best"]["test_mrr"]
    assert summary["best"]["metric"] == "val_mrr"
    assert best - mlp >= 0.5 * (sage - mlp), (best, mlp, sage)  # measured: 0.362


def test_cli_link_split_of_an_edge_list(tmp_path: Path) -> None:
    ds = sbm(num_nodes=600, avg_degree=8, seed=1)
    edges = tmp_path / "edges.csv"
    np.savetxt(edges, np.stack([ds.src, ds.dst], 1), fmt="%d", delimiter=",")
    np.save(tmp_path / "x.npy", np.asarray(ds.x))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "gnnpar.train", str(edges), "--features",
           str(tmp_path / "x.npy"), "--task", "link", "--split", "0.8,0.1,0.1", "--epochs",
           "1", "--fanouts", "5,5", "--root", str(tmp_path / "data"), "--out", str(out),
           "--decoder", "mlp", "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "test MRR:" in done.stdout
    record = json.loads((out / "record.json").read_text())
    s = record["summary"]
    assert s["task"] == "link" and 0.0 < s["test_mrr"] <= 1.0
    assert record["config"]["link"]["decoder"] == "mlp"


@pytest.mark.parametrize("settings,field", [
    ({"decoder": "mlp"}, "link.decoder"),                # a link flag on a node task
    ({"task": "link", "mode": "full"}, "train.mode"),    # link prediction samples
    ({"task": "link", "decoder": "bilinear"}, "link.decoder"),
    ({"task": "link", "split": "a.npy,b.npy,c.npy"}, "data.split"),
])
def test_bad_link_settings(settings: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as exc:
        configure(Config(), **settings).validate()
    assert exc.value.field == field and exc.value.fix
