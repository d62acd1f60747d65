"""``gnnpar-export``: a trained run's model as a plain PyG module's ``state_dict``.

Usage::

    gnnpar-export RUN_DIR --out model.pt

writes ``model.pt`` (``torch.save`` of the PyG model's ``state_dict``: tensors only,
loadable with ``torch.load(weights_only=True)``) and ``model.json`` beside it (the
class in ``torch_geometric.nn.models`` and its constructor arguments), so that a
process without gnnpar rebuilds the model::

    import json, torch, torch_geometric.nn.models as models
    spec = json.load(open("model.json"))
    model = getattr(models, spec["class"])(**spec["kwargs"])
    model.load_state_dict(torch.load("model.pt", weights_only=True))
    model.eval()  # model(x, edge_index): the logits of every node

A link-prediction run exports its encoder (``model(x, edge_index)`` are the node
embeddings); ``model.json``'s ``decoder`` says how a pair scores: ``dot`` (the inner
product) or ``mlp`` (``torch.nn.Sequential`` of ``decoder_layers`` in
``model-decoder.pt``, on the elementwise product).  Typed runs and graphs without
features (learnt input rows) have no plain PyG form and are refused.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gnnpar.config import ArgumentParser, load_config_file
from gnnpar.errors import ConfigError, GnnparError

PROG = "gnnpar-export"
PYG_CLASSES = {"sage": "GraphSAGE", "gcn": "GCN", "gat": "GAT"}
"""The ``torch_geometric.nn.models`` class of each ``--model``."""


def read_run(run_dir: str | os.PathLike[str]) -> tuple[Any, dict[str, Any]]:
    """A run directory's configuration (``config.json``) and record (``record.json``).

    Raises:
        ConfigError: Not a run directory, or a run without a checkpoint.
    """
    from gnnpar.train.config import Config
    from gnnpar.train.record import RECORD_FILE, RunRecord
    from gnnpar.train.rundir import CHECKPOINT_DIR, CONFIG_FILE

    path = Path(run_dir)
    if not (path / CONFIG_FILE).is_file():
        raise ConfigError("is not a gnnpar run directory (no config.json).", path=path,
                          field="RUN_DIR", fix="pass the --out of a gnnpar-train run.")
    if not (path / CHECKPOINT_DIR / "state.json").is_file():
        raise ConfigError("holds no checkpoint (the run stopped before its first one).",
                          path=path, field="checkpoint",
                          fix="train it to its first checkpoint (--resume continues it).")
    from gnnpar.config import from_dict

    cfg = from_dict(Config, load_config_file(path / CONFIG_FILE), str(path / CONFIG_FILE))
    record = RunRecord.load(path / RECORD_FILE).to_dict()
    return cfg, record


def model_spec(cfg: Any, record: dict[str, Any], where: str | os.PathLike[str]
               ) -> dict[str, Any]:
    """``{"class", "kwargs", "task", ...}``: what rebuilds the run's PyG model.

    Raises:
        ConfigError: A typed run, or a graph without features.
    """
    from gnnpar.train.rundir import CONFIG_FILE

    part = record["partition"]
    wrote = cfg.run.save_predictions or cfg.run.save_embeddings is not None
    fix = (f"read the outputs the run wrote with gnnpar.load_predictions({str(where)!r}); "
           "for another graph, train on it with --save-predictions." if wrote else
           "write its outputs by training it again with --save-predictions: gnnpar-train "
           f"--config {Path(where) / CONFIG_FILE} --save-predictions --overwrite.")
    if part.get("node_types"):
        raise ConfigError("is a typed run: its relation-wise model has no plain PyG "
                          "class, which gnnpar-export and gnnpar-predict write and run.",
                          path=where, field="partition.node_types", fix=fix)
    if not part.get("feat_dim"):
        raise ConfigError("trained on a graph without features: its input rows are "
                          "learnt per node, which a PyG module does not hold.", path=where,
                          field="partition.feat_dim", fix=fix)
    m, link = cfg.model, cfg.data.task == "link"
    kwargs: dict[str, Any] = {
        "in_channels": int(part["feat_dim"]), "hidden_channels": m.hidden,
        "num_layers": m.layers, "out_channels": m.hidden if link else int(part["num_classes"]),
        "dropout": m.dropout}
    if m.name == "gat":
        kwargs["heads"] = m.heads
    spec: dict[str, Any] = {"class": PYG_CLASSES[m.name], "module": "torch_geometric.nn.models",
                            "kwargs": kwargs, "task": cfg.data.task}
    if link:
        spec["decoder"] = cfg.link.decoder
    return spec


def plain_state(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The PyG model's and the link decoder's state dicts from a checkpoint's model state.

    Full-graph runs wrap each layer in a halo-exchange ``DistConv`` (``convs.0.conv.``);
    link runs hold the encoder under ``gnn.`` and the decoder under ``decoder.``.
    """
    model, decoder = {}, {}
    for key, value in state.items():
        if key.startswith("decoder."):
            decoder[key[len("decoder."):]] = value
            continue
        key = re.sub(r"^convs\.(\d+)\.conv\.", r"convs.\1.", key.removeprefix("gnn."))
        model[key] = value
    return model, decoder


def load_trained(run_dir: str | os.PathLike[str]) -> tuple[Any, dict[str, Any], Any, Any]:
    """``(config, spec, PyG model with the trained weights, decoder state)`` of a run.

    The model is built as the trainer builds it (:func:`~gnnpar.train.models.build_model`)
    and given the checkpoint's weights.
    """
    from gnnpar.train.checkpoint import read_model_state
    from gnnpar.train.models import build_model
    from gnnpar.train.rundir import CHECKPOINT_DIR

    cfg, record = read_run(run_dir)
    spec = model_spec(cfg, record, run_dir)
    kw = spec["kwargs"]
    model = build_model(cfg.model, kw["in_channels"], kw["out_channels"])
    weights, decoder = plain_state(read_model_state(Path(run_dir) / CHECKPOINT_DIR))
    try:
        model.load_state_dict(weights)
    except RuntimeError as exc:
        raise ConfigError(f"the checkpoint does not fit the run's model ({exc}).",
                          path=Path(run_dir) / CHECKPOINT_DIR, field="model",
                          fix="export a run directory written by gnnpar-train.") from None
    return cfg, spec, model, decoder


def export(run_dir: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write ``out`` (the state dict) and ``out`` with ``.json`` (the spec); see the module.

    Returns:
        The ``.json`` file written.
    """
    import torch

    from gnnpar.io import write_json

    target = Path(out)
    if target.is_dir():
        raise ConfigError("is a directory.", path=target, field="--out",
                          fix="name the file, e.g. --out model.pt.")
    _, spec, model, decoder = load_trained(run_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    if decoder:
        dec_path = target.with_name(f"{target.stem}-decoder.pt")
        _save(torch, decoder, dec_path)
        spec["decoder_state"] = dec_path.name
        spec["decoder_layers"] = [f"Linear({v.shape[1]}, {v.shape[0]})" for k, v in
                                  decoder.items() if k.endswith(".weight")]
    _save(torch, model.state_dict(), target)
    spec["state_dict"] = target.name
    spec["source"] = str(run_dir)
    meta = target.with_suffix(".json")
    write_json(meta, spec)
    return meta


def _save(torch: Any, state: dict[str, Any], path: Path) -> None:
    """``torch.save`` aside, then renamed into place."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save({k: v.detach().cpu().contiguous() for k, v in state.items()}, tmp)
    os.replace(tmp, path)


def build_parser() -> argparse.ArgumentParser:
    """The ``gnnpar-export`` argument parser."""
    p = ArgumentParser(prog=PROG, description="Write a trained run's model as a plain PyG "
                       "module's state_dict (--out FILE.pt) and its constructor arguments "
                       "(FILE.json), reloadable without gnnpar.",
                       epilog=f"Example: {PROG} runs/sbm-sample --out model.pt")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a gnnpar-train run directory")
    p.add_argument("--out", required=True, metavar="FILE.pt", help="the state_dict to write")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``gnnpar-export``; the exit status."""
    args = build_parser().parse_args(argv)
    try:
        meta = export(args.run_dir, args.out)
    except GnnparError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: the PyG model's state_dict; {meta}: its class and constructor "
          "arguments (torch.load(weights_only=True) and the class rebuild it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
