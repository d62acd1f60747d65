"""gnnpar.train.checkpoint and gnnpar.train.record in one process (no process group needed)."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import pytest
import torch
from torch_geometric.nn.models import GraphSAGE

from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.train.checkpoint import has_checkpoint, load_checkpoint, read_state, save_checkpoint
from gnnpar.train.record import EPOCH_FIELDS, RunRecord

CTX = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"),
                  backend="gloo")

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 4, generator=g)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    opt.zero_grad()
    model(x, edge_index).square().sum().backward()
    opt.step()


def _model_and_opt(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = GraphSAGE(4, 8, 2, 3)
    return model, torch.optim.Adam(model.parameters(), lr=0.05, betas=(0.8, 0.9))


def test_checkpoint_round_trip_resumes_training_exactly(tmp_path: Path) -> None:
    model, opt = _model_and_opt(0)
    for s in range(2):
        _step(model, opt, s)
    ckpt = tmp_path / "ckpt"
    save_checkpoint(ckpt, CTX, model, opt, extra={"epoch": 1, "best": {"acc": 0.5},
                                                  "rng": torch.arange(3)})
    assert has_checkpoint(ckpt)
    reference, ref_opt = copy.deepcopy((model, opt))  # one memo: ref_opt steps reference
    _step(reference, ref_opt, 2)

    model2, opt2 = _model_and_opt(1)
    extra = load_checkpoint(ckpt, CTX, model2, opt2)
    assert extra["epoch"] == 1 and extra["best"] == {"acc": 0.5}
    assert torch.equal(extra["rng"], torch.arange(3))
    assert opt2.param_groups[0]["betas"][0] == 0.8
    _step(model2, opt2, 2)
    for (name, a), b in zip(reference.state_dict().items(), model2.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name


def test_saving_again_replaces_the_checkpoint_atomically(tmp_path: Path) -> None:
    model, opt = _model_and_opt(0)
    ckpt = tmp_path / "ckpt"
    save_checkpoint(ckpt, CTX, model, opt, extra={"epoch": 0})
    save_checkpoint(ckpt, CTX, model, opt, extra={"epoch": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert load_checkpoint(ckpt, CTX, *_model_and_opt(3))["epoch"] == 1
    save_checkpoint(tmp_path / "model-only", CTX, model)
    fresh, _ = _model_and_opt(4)
    load_checkpoint(tmp_path / "model-only", CTX, fresh)
    assert all(torch.equal(a, b)
               for a, b in zip(model.parameters(), fresh.parameters(), strict=True))


def test_checkpoint_errors_name_the_path_and_the_fix(tmp_path: Path) -> None:
    model, opt = _model_and_opt(0)
    with pytest.raises(ConfigError, match="no checkpoint here"):
        load_checkpoint(tmp_path / "missing", CTX, model, opt)
    with pytest.raises(ConfigError, match="cannot store"):
        save_checkpoint(tmp_path / "bad", CTX, model, extra={"f": object()})
    save_checkpoint(tmp_path / "ok", CTX, model, opt)
    torch.manual_seed(0)
    other = GraphSAGE(4, 16, 2, 3)
    with warnings.catch_warnings(), pytest.raises(ConfigError, match="does not fit"):
        warnings.simplefilter("ignore")
        load_checkpoint(tmp_path / "ok", CTX, other, torch.optim.Adam(other.parameters()))
    state = tmp_path / "ok" / "state.json"
    doc = json.loads(state.read_text())
    state.write_text(json.dumps({**doc, "format_version": 99}))
    with pytest.raises(ConfigError, match="format"):
        load_checkpoint(tmp_path / "ok", CTX, model, opt)


def _entry(epoch: int, loss: float) -> dict:
    return {**dict.fromkeys(EPOCH_FIELDS), "epoch": epoch, "train_loss": loss, "comm": {},
            "eval_comm": {}}


def test_read_state_gives_the_json_part_without_tensors(tmp_path: Path) -> None:
    model, opt = _model_and_opt(0)
    save_checkpoint(tmp_path / "ckpt", CTX, model, opt,
                    extra={"position": {"epoch": 2, "step": 0}, "rng": torch.arange(3)})
    state = read_state(tmp_path / "ckpt")
    assert state["world_size"] == 1
    assert state["extra"]["position"] == {"epoch": 2, "step": 0}
    assert set(state["extra"]["rng"]) == {"__tensor__"}
    with pytest.raises(ConfigError, match="no checkpoint here"):
        read_state(tmp_path / "nowhere")


def test_run_record_round_trip_and_resume(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "record.json"
    record = RunRecord(config={"train": {"lr": 0.1}}, partition={"dir": str(tmp_path)},
                       env=RunRecord.environment(1, "gloo", "cpu"))
    for epoch in range(3):
        record.add_epoch(_entry(epoch, 0.5**epoch))
    record.summary = {"best": 0.9}
    record.status = "complete"
    record.write(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "gnnpar-run" and doc["format_version"] == 4
    assert doc["partition"]["dir"] == str(tmp_path) and doc["status"] == "complete"
    assert doc["env"]["world_size"] == 1 and doc["env"]["gnnpar"]
    assert [e["train_loss"] for e in doc["epochs"]] == [1.0, 0.5, 0.25]
    assert list(path.parent.iterdir()) == [path]  # no temporary file left
    edited = {**doc, "status": "running"}  # a record changed after it was written
    path.with_name("edited.json").write_text(json.dumps(edited))
    with pytest.raises(ConfigError, match="digest differs"):
        RunRecord.load(path.with_name("edited.json"))

    resumed = RunRecord.load(path)
    resumed.add_epoch(_entry(1, 7.0))  # a resumed epoch replaces it and what followed
    assert [e["epoch"] for e in resumed.epochs] == [0, 1]
    with pytest.raises(ValueError, match="EPOCH_FIELDS"):
        resumed.add_epoch({"epoch": 2, "loss": 1.0})
    (tmp_path / "junk.json").write_text("[]")
    with pytest.raises(ConfigError, match="gnnpar-run"):
        RunRecord.load(tmp_path / "junk.json")
    (tmp_path / "old.json").write_text(json.dumps({"format": "gnnpar-run",
                                                   "format_version": 1}))
    with pytest.raises(ConfigError, match="format_version"):
        RunRecord.load(tmp_path / "old.json")
