"""A Trainer used from Python writes only into a new, empty or run directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.train.config import Config, RunConfig
from gnnpar.train.trainer import Trainer

CTX = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"),
                  backend="gloo")


@pytest.mark.parametrize("content", ["config.json", "record.json", "notes/keep.txt"])
def test_a_trainer_never_writes_into_a_users_directory(tmp_path: Path, content: str) -> None:
    out = tmp_path / "mine"
    (out / content).parent.mkdir(parents=True)
    (out / content).write_text("years of work")
    cfg = Config(run=RunConfig(out=str(out)))
    with pytest.raises(ConfigError, match="is not gnnpar's"):
        Trainer(cfg, tmp_path / "no-partition-needed", CTX)
    assert (out / content).read_text() == "years of work"
    assert sorted(p.name for p in out.rglob("*")) == sorted(
        {*Path(content).parts})  # nothing added
