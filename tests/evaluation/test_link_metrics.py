"""Ranking metrics against ``ogb.linkproppred.Evaluator``, in one process and on 2 gloo ranks.

Scores are small integers, so ties between positives and negatives are frequent (OGB
ranks a tied positive halfway between its optimistic and pessimistic rank).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gnnpar.errors import ConfigError
from gnnpar.evaluation.ranking import ranking_metrics, shared_negative_hits
from gnnpar.shadow import DeviceShadow
from gnnpar.testing import run_multiproc

KS = (1, 3, 10, 50)
SHARED_KS = (1, 10, 50, 100)


def _scores(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "pos": torch.randint(0, 8, (120,), generator=g).float(),
        "neg": torch.randint(0, 8, (120, 30), generator=g).float(),
        "shared_pos": torch.randint(0, 40, (90,), generator=g).float(),
        "shared_neg": torch.randint(0, 40, (70,), generator=g).float(),  # < 100 negatives
    }


def _ogb_mrr(pos: torch.Tensor, neg: torch.Tensor) -> dict[str, float]:
    from ogb.linkproppred import Evaluator  # here: the spawned ranks need not import it

    out = Evaluator(name="ogbl-citation2").eval({"y_pred_pos": pos, "y_pred_neg": neg})
    ref = {"mrr": float(out["mrr_list"].mean())}
    ref.update({f"hits@{k}": float(out[f"hits@{k}_list"].mean()) for k in (1, 3, 10)})
    ref["hits@50"] = 1.0  # OGB lists Hits@1/3/10; with 30 negatives every rank is <= 31
    return ref


def _ogb_hits(pos: torch.Tensor, neg: torch.Tensor) -> dict[str, float]:
    from ogb.linkproppred import Evaluator

    evaluator = Evaluator(name="ogbl-collab")
    ref = {}
    for k in SHARED_KS:
        evaluator.K = k
        ref[f"hits@{k}"] = evaluator.eval({"y_pred_pos": pos, "y_pred_neg": neg})[f"hits@{k}"]
    return ref


def _assert_close(got: dict[str, float], ref: dict[str, float]) -> None:
    assert got.keys() == ref.keys()
    for k, v in ref.items():
        assert got[k] == pytest.approx(v, rel=1e-6, abs=1e-9), k


def test_one_process_matches_ogb() -> None:
    s = _scores()
    assert bool((s["neg"] == s["pos"][:, None]).any())  # ties present
    with DeviceShadow() as shadow:
        pos, neg = s["pos"].to(shadow.device), s["neg"].to(shadow.device)
        with shadow.window() as w:
            got = ranking_metrics(pos, neg, ks=KS)
    assert w.num_syncs == 1, w.sites  # the result, read once
    _assert_close(got, _ogb_mrr(s["pos"], s["neg"]))
    ref = _ogb_hits(s["shared_pos"], s["shared_neg"])
    assert ref["hits@100"] == 1.0 and 0 < ref["hits@10"] < 1
    _assert_close(shared_negative_hits(s["shared_pos"], s["shared_neg"], ks=SHARED_KS), ref)
    # float64 scores: compared in their own dtype, as OGB does.
    pos64, neg64 = s["pos"].double() + 1e-12, s["neg"].double()
    _assert_close(ranking_metrics(pos64, neg64, ks=KS), _ogb_mrr(pos64, neg64))


def test_shape_errors() -> None:
    with pytest.raises(ConfigError, match="neg_score"):
        ranking_metrics(torch.zeros(3), torch.zeros(4, 2))
    assert all(v != v for v in ranking_metrics(torch.zeros(0), torch.zeros(0, 5)).values())
    for ks in ((), (0,), (2.5,)):
        with pytest.raises(ConfigError, match="ks"):
            shared_negative_hits(torch.zeros(3), torch.zeros(4), ks=ks)  # type: ignore[arg-type]


def _worker(scores: dict[str, torch.Tensor], splits: list[dict[str, int]]) -> list[Any]:
    from gnnpar import distributed

    ctx = distributed.init()
    out = []
    for cut in splits:  # rank 0 takes the first `cut` rows of each array, rank 1 the rest
        part = {k: v[:cut[k]] if ctx.rank == 0 else v[cut[k]:] for k, v in scores.items()}
        out.append((ranking_metrics(part["pos"], part["neg"], ctx, ks=KS),
                    shared_negative_hits(part["shared_pos"], part["shared_neg"], ctx,
                                         ks=SHARED_KS)))
    return out


def test_two_ranks_match_ogb() -> None:
    s = _scores(1)
    splits = [
        {"pos": 37, "neg": 37, "shared_pos": 20, "shared_neg": 55},  # uneven
        {"pos": 120, "neg": 120, "shared_pos": 90, "shared_neg": 0},  # rank 1: no positive,
    ]                                                                 # rank 0: no negative
    ref_mrr, ref_hits = _ogb_mrr(s["pos"], s["neg"]), _ogb_hits(s["shared_pos"], s["shared_neg"])
    for per_rank in run_multiproc(_worker, 2, s, splits):
        for got_mrr, got_hits in per_rank:
            _assert_close(got_mrr, ref_mrr)
            _assert_close(got_hits, ref_hits)
