"""What typed graphs refuse, before any worker starts: one error naming field and fix."""

from __future__ import annotations

import pytest

from gnnpar.datasets.synthetic import typed
from gnnpar.errors import ConfigError
from gnnpar.sampling.fanouts import Fanouts, resolve_relation
from gnnpar.train.config import Config, ModelConfig, SampleConfig, TrainConfig
from gnnpar.train.prepare import check_graph_settings

LAYOUT = typed(num_papers=50, num_authors=20, num_venues=6).layout()


@pytest.mark.parametrize("cfg,field,fix", [
    (Config(train=TrainConfig(eval="full")), "train.eval", "--eval sampled"),
    (Config(train=TrainConfig(mode="full", eval="none")), "train.mode", "--mode sample"),
    (Config(train=TrainConfig(eval="sampled"), model=ModelConfig(name="gat")), "model.name",
     "--model sage"),
    (Config(train=TrainConfig(eval="sampled"),
            sample=SampleConfig(relation_fanouts="cited_by=5,5")),
     "sample.relation_fanouts", "src__rel__dst"),
])
def test_typed_graph_refuses(cfg: Config, field: str, fix: str) -> None:
    with pytest.raises(ConfigError) as exc:
        check_graph_settings(cfg.validate(), "DATASET", LAYOUT, 0)
    assert exc.value.field == field and fix in exc.value.fix


def test_homogeneous_graph_refuses_typed_settings() -> None:
    cfg = Config(model=ModelConfig(embed_dim=8), train=TrainConfig(sparse_lr=0.1)).validate()
    with pytest.raises(ConfigError, match="--embed-dim, --sparse-lr") as exc:
        check_graph_settings(cfg, "DATASET", None, 16)
    assert exc.value.field == "model.embed_dim"
    check_graph_settings(cfg, "DATASET", None, 0)  # featureless: its nodes learn rows
    check_graph_settings(Config().validate(), "DATASET", None, 16)
    typed_only = Config(sample=SampleConfig(relation_fanouts="cites=5,5")).validate()
    with pytest.raises(ConfigError, match="--relation-fanouts"):
        check_graph_settings(typed_only, "DATASET", None, 0)
    with pytest.raises(ConfigError, match="no node features") as exc:
        check_graph_settings(Config(train=TrainConfig(mode="full")).validate(), "DATASET",
                             None, 0)
    assert exc.value.field == "train.mode"


def test_relation_fanouts_syntax_and_names() -> None:
    with pytest.raises(ConfigError, match="REL=F1,F2"):
        Config(sample=SampleConfig(relation_fanouts="cites:5,5")).validate()
    with pytest.raises(ConfigError, match="2 layers"):
        Config(sample=SampleConfig(relation_fanouts="cites=5")).validate()
    assert resolve_relation("cites", LAYOUT) == ("paper", "cites", "paper")
    assert resolve_relation("paper__rev_writes__author", LAYOUT)[1] == "rev_writes"
    fan = Fanouts.parse({r: [2, 0] for r in LAYOUT.edge_types}, LAYOUT)
    assert fan.per_relation == ((2, 0),) * len(LAYOUT.edge_types)
    assert Fanouts.parse([3, 1], LAYOUT).per_relation == ((3, 1),) * len(LAYOUT.edge_types)
    with pytest.raises(ConfigError, match="no fan-outs for"):
        Fanouts.parse({"cites": [1, 1]}, LAYOUT)
    with pytest.raises(ConfigError, match="lengths"):
        Fanouts.parse({r: [1] * (1 + i % 2) for i, r in enumerate(LAYOUT.edge_types)}, LAYOUT)
    with pytest.raises(ConfigError, match="need a typed graph"):
        Fanouts.parse({"cites": [1, 1]})
