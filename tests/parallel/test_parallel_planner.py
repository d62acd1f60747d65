"""The layout planner, the meta-device profile, and GNN plan checks (single process)."""

from __future__ import annotations

import pytest
import torch

from gnnpar.errors import ConfigError
from gnnpar.parallel.config import ParallelConfig
from gnnpar.parallel.models import TransformerConfig, TransformerLM, mlp
from gnnpar.parallel.pipeline_parallel import stage_units_of, units_or_empty
from gnnpar.parallel.planner import estimate, plan
from gnnpar.parallel.profile import profile_model
from gnnpar.parallel.tensor_parallel import default_plan


def lm() -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(TransformerConfig(vocab_size=64, dim=32, n_heads=4, n_layers=4,
                                           ffn_dim=64, max_seq_len=16))


def tokens(batch: int = 8) -> torch.Tensor:
    return torch.randint(0, 64, (batch, 16), generator=torch.Generator().manual_seed(0))


def estimate_of(model, x, config):
    units = units_or_empty(model)
    prof = profile_model(model, x, units, default_plan(model, config.tp) if config.tp > 1 else None)
    stages = stage_units_of(model, config.pp) if config.pp > 1 else [units]
    return estimate(prof, config, stages)


def test_parameter_bytes_by_hand_uneven_shards():
    # Linear(10, 6) column-parallel over 4 ranks: torch.chunk gives rows 2, 2, 2, 0 of
    # weight [6, 10] and bias [6].  Linear(6, 4) row-parallel: weight [4, 6] columns
    # 2, 2, 2, 0; its bias [4] is replicated.
    model = mlp([10, 6, 4])
    by_hand = [4 * (2 * 10 + 2 + 4 * 2 + 4)] * 3 + [4 * 4]
    assert estimate_of(model, torch.randn(8, 10), ParallelConfig(tp=4)).param_bytes == by_hand
    # FSDP over 4 ranks then splits dim 0 of each: [6,10] -> 2,2,2,0 rows; [6] -> 2,2,2,0;
    # [4,6] -> 1 row each; [4] -> 1 each.
    fsdp = [4 * (20 + 2 + 6 + 1)] * 3 + [4 * (6 + 1)]
    assert estimate_of(model, torch.randn(8, 10), ParallelConfig(dp=4)).param_bytes == fsdp
    # DDP replicates: every rank holds everything.
    ddp = estimate_of(model, torch.randn(8, 10), ParallelConfig(dp=4, dp_mode="ddp"))
    assert ddp.param_bytes == [4 * (60 + 6 + 24 + 4)] * 4


def test_profile_splits_activations_and_counts_tensor_parallel_collectives():
    model = lm()
    units = units_or_empty(model)
    whole = profile_model(model, tokens(), units, None)
    split = profile_model(model, tokens(), units, default_plan(model, 2))
    block, block_tp = whole.units[1], split.units[1]
    assert block.tp_saved == 0 and block_tp.tp_saved > 0
    assert block_tp.saved + block_tp.tp_saved == block.saved  # the same tensors, classified
    assert block.flops + block.tp_flops == pytest.approx(block_tp.flops + block_tp.tp_flops)
    # A block: wo and w2 all-reduce forward; wq, wk, wv, w1 all-reduce input grads.
    hidden = 8 * 16 * 32 * 4
    assert sorted(block_tp.tp_collectives) == [("all_reduce", hidden)] * 6
    assert block.tp_collectives == []
    # The pipeline sends a block's output: [B, T, dim] float32.
    assert block.output_bytes == hidden


def test_more_tensor_parallelism_holds_fewer_bytes():
    model = lm()
    one = estimate_of(model, tokens(), ParallelConfig())
    tp2 = estimate_of(model, tokens(), ParallelConfig(tp=2))
    fsdp4 = estimate_of(model, tokens(), ParallelConfig(dp=4))
    assert max(tp2.param_bytes) < 0.55 * max(one.param_bytes)
    assert max(fsdp4.param_bytes) < 0.3 * max(one.param_bytes)
    assert tp2.activation_bytes < one.activation_bytes
    assert one.comm_bytes == 0 and tp2.comm_by_kind.keys() == {"all_gather", "all_reduce"}


def test_plan_rejects_layouts_over_budget_and_proposes_the_fastest_that_fits():
    model = lm()
    everything = plan(model, 4, 10**12, tokens())
    peaks = sorted(e.peak_bytes for e in everything.feasible)
    budget = peaks[len(peaks) // 2]
    result = plan(model, 4, budget, tokens())
    assert result.best.peak_bytes <= budget
    assert all(e.peak_bytes <= budget for e in result.feasible)
    assert result.best.step_time_s == min(e.step_time_s for e in result.feasible)
    over = [r for r in result.rejected if r.estimate is not None]
    assert over and all(r.estimate.peak_bytes > budget and "over the budget" in r.reason
                        for r in over)
    assert len(result.feasible) + len(result.rejected) == len(ParallelConfig.layouts(4))


def test_plan_rejects_layouts_that_cannot_run():
    model = lm()  # 4 heads: tp=3 cannot split them; a batch of 6 does not split in 4
    result = plan(model, 3, 10**12, tokens(6))
    reasons = {(r.config.dp, r.config.tp, r.config.pp): r.reason for r in result.rejected}
    assert "n_heads" in reasons[(1, 3, 1)]
    assert all(e.config.tp != 3 for e in result.feasible)
    result = plan(model, 4, 10**12, tokens(6))
    assert "batch_size=6" in {(r.config.dp, r.config.tp, r.config.pp): r.reason
                              for r in result.rejected}[(4, 1, 1)]


def test_plan_raises_when_nothing_fits():
    with pytest.raises(ConfigError, match="no layout of 4 ranks fits") as info:
        plan(lm(), 4, 1000, tokens())
    assert info.value.field == "memory_budget"
