"""Checkpoints: nothing from a file is executed, damage is refused, a crash loses nothing.

A pickle that writes a marker file when unpickled stands for a crafted checkpoint: it is
placed as ``torch.distributed.checkpoint``'s ``.metadata`` (which that format unpickles
on load) in an old-format checkpoint and beside a current one.  A flipped bit in
``tensors.bin`` and a hand edit of ``state.json`` must be refused before any parameter
changes; a crash between the two renames of a save must leave the previous checkpoint
loadable; and ``gnnpar-train --resume`` on a damaged checkpoint must exit with one line
naming the file.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from torch_geometric.nn.models import GraphSAGE

from gnnpar.distributed import DistContext, shutdown
from gnnpar.errors import ConfigError
from gnnpar.train.checkpoint import load_checkpoint, save_checkpoint
from gnnpar.train.cli import main

CTX = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"),
                  backend="gloo")
TINY = "synthetic:sbm?nodes=1500&feat_dim=16&classes=4&seed=2&homophily=0.8"


class _Payload:
    """Unpickling this creates the file named by ``path`` (what an attacker would run)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (os.mkdir, (self.path, ))  # type: ignore[return-value]


def _model(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = GraphSAGE(4, 8, 2, 3)
    return model, torch.optim.Adam(model.parameters())


def _params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_a_crafted_metadata_pickle_is_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    model, opt = _model(0)
    ckpt = tmp_path / "ckpt"
    save_checkpoint(ckpt, CTX, model, opt, extra={"epoch": 1})
    (ckpt / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    fresh, fresh_opt = _model(1)
    assert load_checkpoint(ckpt, CTX, fresh, fresh_opt) == {"epoch": 1}
    assert not marker.exists()
    # A checkpoint of the older DCP format (its index a pickle) is refused unread.
    old = tmp_path / "old"
    old.mkdir()
    (old / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    (old / "state.json").write_text(json.dumps({"format": "gnnpar-checkpoint",
                                                "format_version": 1, "world_size": 1,
                                                "state": {}}))
    with pytest.raises(ConfigError, match="format_version is 1; this gnnpar reads 2") as exc:
        load_checkpoint(old, CTX, fresh, fresh_opt)
    assert exc.value.path == str(old / "state.json")
    assert not marker.exists()


def test_a_flipped_bit_or_an_edit_is_refused_before_anything_changes(tmp_path: Path) -> None:
    model, opt = _model(0)
    ckpt = tmp_path / "ckpt"
    save_checkpoint(ckpt, CTX, model, opt, extra={"epoch": 1})
    fresh, fresh_opt = _model(1)
    before = _params(fresh)
    tensors = ckpt / "tensors.bin"
    data = bytearray(tensors.read_bytes())
    data[len(data) // 2] ^= 0x01
    tensors.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match="damaged") as exc:
        load_checkpoint(ckpt, CTX, fresh, fresh_opt)
    assert exc.value.path == str(tensors) and "--overwrite" in exc.value.fix
    assert all(torch.equal(a, b) for a, b in zip(before, _params(fresh), strict=True))

    save_checkpoint(ckpt, CTX, model, opt, extra={"epoch": 1})
    state = ckpt / "state.json"
    doc = json.loads(state.read_text())
    doc["state"]["extra"]["epoch"] = 5
    state.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="changed after it was written") as exc:
        load_checkpoint(ckpt, CTX, fresh, fresh_opt)
    assert exc.value.path == str(state)
    (ckpt / "tensors.bin").unlink()
    save_checkpoint(ckpt, CTX, model, opt, extra={"epoch": 1})
    (ckpt / "tensors.bin").unlink()
    with pytest.raises(ConfigError, match="missing"):
        load_checkpoint(ckpt, CTX, fresh, fresh_opt)


def test_a_crash_between_the_renames_of_a_save_keeps_the_previous_one(tmp_path: Path) -> None:
    model, opt = _model(0)
    ckpt = tmp_path / "ckpt"
    save_checkpoint(ckpt, CTX, model, opt, extra={"epoch": 1})
    # What replace_directory leaves when killed after moving the old one aside.
    aside = tmp_path / ".ckpt.old-x1y2"
    aside.mkdir()
    os.rename(ckpt, aside / "d")
    (tmp_path / ".ckpt.tmp").mkdir()  # the new one, half written
    fresh, fresh_opt = _model(1)
    assert load_checkpoint(ckpt, CTX, fresh, fresh_opt) == {"epoch": 1}
    assert all(torch.equal(a, b)
               for a, b in zip(_params(model), _params(fresh), strict=True))
    save_checkpoint(ckpt, CTX, model, opt, extra={"epoch": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # nothing left over


def test_resume_from_a_damaged_checkpoint_is_one_line_naming_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    args = [TINY, "--root", str(tmp_path / "data"), "--mode", "full", "--hidden", "8",
            "--no-progress", "--out", str(run)]
    try:
        assert main([*args, "--epochs", "2"]) == 0
    finally:
        shutdown()
    tensors = run / "checkpoint" / "tensors.bin"
    data = bytearray(tensors.read_bytes())
    data[-3] ^= 0x10
    tensors.write_bytes(bytes(data))
    record = (run / "record.json").read_bytes()
    capsys.readouterr()
    try:
        assert main([*args, "--epochs", "3", "--resume"]) == 1
    finally:
        shutdown()
    text = capsys.readouterr().err
    err = [ln for ln in text.splitlines() if "error:" in ln]  # beside the start-up log lines
    assert "Traceback" not in text and len(err) == 1, text
    assert str(tensors) in err[0] and "damaged" in err[0], err
    assert (run / "record.json").read_bytes() == record  # the finished run is untouched
    shutil.rmtree(run)
