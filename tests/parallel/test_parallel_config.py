"""ParallelConfig validation, layouts, and the single-process planning pieces."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from gnnpar.errors import ConfigError
from gnnpar.parallel.config import ParallelConfig
from gnnpar.parallel.models import TransformerConfig, TransformerLM, mlp
from gnnpar.parallel.pipeline_parallel import (
    pipeline_units,
    prune_to_stage,
    split_units,
    stage_units_of,
)
from gnnpar.parallel.tensor_parallel import check_plan, default_plan, mlp_plan, shard_size


def test_layouts_of_four_ranks():
    got = [(c.dp, c.tp, c.pp) for c in ParallelConfig.layouts(4)]
    assert sorted(got) == sorted(
        (dp, tp, pp) for dp, tp, pp in itertools.product(range(1, 5), repeat=3) if dp * tp * pp == 4
    )
    ddp = [(c.dp, c.tp, c.pp) for c in ParallelConfig.layouts(4, dp_mode="ddp")]
    assert (2, 2, 1) not in ddp and (1, 4, 1) in ddp


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"dp": 0}, "dp"),
        ({"tp": -2}, "tp"),
        ({"pp": 1.5}, "pp"),
        ({"dp_mode": "zero"}, "dp_mode"),
        ({"schedule": "interleaved"}, "schedule"),
        ({"pp": 2, "n_microbatches": 0}, "n_microbatches"),
        ({"pp": 4, "n_microbatches": 2}, "n_microbatches"),  # 1F1B needs >= pp
        ({"dp": 2, "tp": 2, "dp_mode": "ddp"}, "dp_mode"),
    ],
)
def test_bad_config_raises_config_error(kwargs, field):
    with pytest.raises(ConfigError) as info:
        ParallelConfig(**kwargs)
    assert info.value.field == field
    assert isinstance(info.value, ValueError) and info.value.fix


def test_gpipe_allows_fewer_micro_batches_than_stages():
    assert ParallelConfig(pp=4, schedule="gpipe", n_microbatches=2).microbatches == 2
    assert ParallelConfig(pp=3).microbatches == 3 and ParallelConfig(dp=2).microbatches == 1


def test_batch_must_split_into_replicas_and_micro_batches():
    ParallelConfig(dp=2, pp=2).validate(4, batch_size=8)
    with pytest.raises(ConfigError, match="dp=2 replicas of 2 micro-batches") as info:
        ParallelConfig(dp=2, pp=2).validate(4, batch_size=6)
    assert info.value.field == "batch_size"


@pytest.mark.parametrize("layout", [(2, 2, 2), (3, 1, 1), (1, 1, 1)])
def test_world_size_mismatch_names_every_degree(layout):
    dp, tp, pp = layout
    with pytest.raises(ConfigError, match=rf"dp={dp}, tp={tp}, pp={pp}") as info:
        ParallelConfig(dp=dp, tp=tp, pp=pp).validate(4)
    assert info.value.field == "dp*tp*pp"
    assert "(dp=4, tp=1, pp=1)" in str(info.value)  # a layout that works is proposed


# ---------------------------------------------------------------- pipeline units


def brute_force_split(weights, k):
    n = len(weights)
    best = None
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = (0, *cuts, n)
        cost = max(sum(weights[a:b]) for a, b in itertools.pairwise(bounds))
        best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_split_units_minimises_the_largest_stage(seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(2, 9, (1,), generator=g))
    weights = torch.randint(0, 50, (n,), generator=g).tolist()
    for k in range(1, n + 1):
        stages = split_units([str(i) for i in range(n)], weights, k)
        assert len(stages) == k and all(stages)
        assert [u for s in stages for u in s] == [str(i) for i in range(n)]
        got = max(sum(weights[int(u)] for u in s) for s in stages)
        assert got == brute_force_split(weights, k)


def test_more_stages_than_units_is_a_config_error():
    with pytest.raises(ConfigError, match="pp=4 stages") as info:
        split_units(["a", "b", "c"], [1, 1, 1], 4)
    assert info.value.field == "pp"
    with pytest.raises(ConfigError, match="cannot cut"):
        pipeline_units(nn.Linear(2, 2))


def tiny_lm() -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(TransformerConfig(vocab_size=20, dim=8, n_heads=2, n_layers=3,
                                           ffn_dim=16, max_seq_len=6))


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
@pytest.mark.parametrize("pp", [2, 3])
def test_stages_compose_to_the_whole_model(kind, pp):
    torch.manual_seed(0)
    model = mlp([5, 7, 7, 3]) if kind == "mlp" else tiny_lm()
    x = torch.randn(4, 5) if kind == "mlp" else torch.randint(0, 20, (4, 6))
    stages = stage_units_of(model, pp)
    units = pipeline_units(model)
    h, names = x, []
    for keep in stages:
        stage = prune_to_stage(copy.deepcopy(model), keep, units)
        names += [n for n, _ in stage.named_parameters()]
        h = stage(h)
    torch.testing.assert_close(h, model(x), rtol=0, atol=0)
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())  # same names


# ---------------------------------------------------------------- tensor-parallel plans


def test_shard_size_follows_torch_chunk():
    for n in range(0, 13):
        for parts in range(1, 6):
            chunks = torch.arange(n).chunk(parts) if n else ()
            want = [len(c) for c in chunks] + [0] * (parts - len(chunks))
            assert [shard_size(n, parts, i) for i in range(parts)] == want


def test_mlp_plan_pairs_linears_across_elementwise_modules():
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Dropout(0.0), nn.Linear(8, 8),
                          nn.LayerNorm(8), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2),
                          nn.Linear(2, 2))
    plan = mlp_plan(model)
    kinds = {k: (type(v).__name__, v.output_layouts) for k, v in plan.items()}
    assert kinds == {
        "0": ("ColwiseParallel", (Shard(-1),)),
        "3": ("RowwiseParallel", (Replicate(),)),
        "5": ("ColwiseParallel", (Shard(-1),)),
        "7": ("RowwiseParallel", (Replicate(),)),
        "8": ("ColwiseParallel", (Replicate(),)),  # last one, alone: gathered
    }
    broken = mlp_plan(nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2)))
    assert all(isinstance(v, ColwiseParallel) and v.output_layouts == (Replicate(),)
               for v in broken.values()) and sorted(broken) == ["0", "2"]


def test_transformer_plan_needs_tp_dividing_heads():
    model = tiny_lm()
    plan = default_plan(model, 2)
    assert isinstance(plan["layers.2.attention.wo"], RowwiseParallel)
    assert isinstance(plan["output"], ColwiseParallel)
    check_plan(model, plan)
    with pytest.raises(ConfigError, match="tp=3 does not divide n_heads=2") as info:
        default_plan(model, 3)
    assert info.value.field == "n_heads"


def test_bad_plans_are_config_errors():
    model = tiny_lm()
    with pytest.raises(ConfigError, match="does not have"):
        check_plan(model, {"layers.9.attention.wq": ColwiseParallel()})
    with pytest.raises(ConfigError, match="split only nn.Linear"):
        check_plan(model, {"layers.0.attention": ColwiseParallel()})
    with pytest.raises(ConfigError, match="no ready tensor-parallel plan"):
        default_plan(nn.LSTM(2, 2), 2)
