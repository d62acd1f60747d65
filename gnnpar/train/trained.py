"""A trained run read back: its settings, its record and its weights, every one checked.

What ``gnnpar-export`` and ``gnnpar-predict`` read of a run directory:

* the run's settings from its checkpoint (digested with it), not ``config.json``, which
  a user may edit to start another run;
* its record (``record.json``, digested since format version 3) for the graph's sizes,
  each checked in range before it sizes a layer;
* the weights through the checkpoint reader (digests, index, finite values), then each
  parameter's shape against the model the settings build, in one line per mismatch.

A run that a killed ``--overwrite`` left aside is put back first
(:func:`~gnnpar.train.rundir.settle_for_reading`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gnnpar.artifacts.checks import count_field
from gnnpar.artifacts.kinds import BEST_DIR, CHECKPOINT_DIR, CONFIG_FILE, RECORD_FILE, STATE_FILE
from gnnpar.errors import ConfigError
from gnnpar.sizes import PARAMETER_BYTES, check_fits

PYG_CLASSES = {"sage": "GraphSAGE", "gcn": "GCN", "gat": "GAT"}
"""The ``torch_geometric.nn.models`` class of each ``--model``."""
_FIX = "pass the directory of a gnnpar-train run, as it wrote it."


@dataclass
class TrainedRun:
    """A run directory's checked contents (:func:`read_run`).

    Attributes:
        path: The run directory.
        config: Its settings (a :class:`~gnnpar.train.config.Config`), from the checkpoint.
        record: Its run record as a dict.
        checkpoint: The checkpoint's identity (:func:`~gnnpar.train.checkpoint.checkpoint_digest`).
        partition: The content digest of the partition it trained on.
        weights: The checkpoint directory read: ``RUN/checkpoint`` (the newest) or
            ``RUN/best`` (the best-valid model).
    """

    path: Path
    config: Any
    record: dict[str, Any]
    checkpoint: str
    partition: str | None
    weights: Path

    @property
    def source(self) -> dict[str, Any]:
        """What an output of this run binds to: the run, its checkpoint and partition."""
        return {"run": str(self.path), "checkpoint": self.checkpoint,
                "partition": self.partition}


def read_run(run_dir: str | os.PathLike[str], best: bool = False) -> TrainedRun:
    """A run directory's settings, record and checkpoint identity, checked.

    Args:
        run_dir: The run directory.
        best: Read the best-valid model's checkpoint (``RUN/best``) instead of the newest.

    Raises:
        ConfigError: Not a run directory, a run without a checkpoint, or a damaged
            record or checkpoint (naming the file and the field).
    """
    from gnnpar.config import from_dict
    from gnnpar.train.checkpoint import checkpoint_digest, read_state
    from gnnpar.train.config import Config
    from gnnpar.train.record import RunRecord
    from gnnpar.train.rundir import settle_for_reading

    path = Path(run_dir)
    if not path.is_dir():
        raise ConfigError("is not a directory.", path=path, field="RUN_DIR",
                          fix="pass the --out of a gnnpar-train run.")
    settle_for_reading(path)
    if not (path / RECORD_FILE).is_file():
        raise ConfigError("is not a gnnpar run directory (no record.json).", path=path,
                          field="RUN_DIR", fix="pass the --out of a gnnpar-train run.")
    record = RunRecord.load(path / RECORD_FILE).to_dict()
    ckpt = path / (BEST_DIR if best else CHECKPOINT_DIR)
    if best and not (ckpt / STATE_FILE).is_file():
        raise ConfigError("holds no best-valid model (best/): the run was trained with "
                          "--no-save-best, before gnnpar kept one, or evaluated nothing yet.",
                          path=path, field="best",
                          fix="drop --best to use the newest checkpoint.")
    if not (ckpt / STATE_FILE).is_file():
        raise ConfigError("holds no checkpoint (the run stopped before its first one).",
                          path=path, field="checkpoint",
                          fix="train it to its first checkpoint (--resume continues it).")
    extra = read_state(ckpt)["extra"]
    saved = extra.get("config")
    if not isinstance(saved, dict):
        raise ConfigError("the checkpoint holds no settings.", path=ckpt / STATE_FILE,
                          field="config", fix=_FIX)
    cfg = from_dict(Config, saved, str(ckpt / STATE_FILE)).validate()
    recorded = record.get("config") or {}
    for section in ("data", "model"):  # the record and the checkpoint of one run
        mine, theirs = (dict(d.get(section) or {}) for d in (recorded, saved))
        mine.pop("root", None), theirs.pop("root", None)  # a resumed run may move its data
        if mine != theirs:
            raise ConfigError(f"its {section} settings differ from the checkpoint's: the "
                              "record and the checkpoint are not of one run.",
                              path=path / RECORD_FILE, field=f"config.{section}", fix=_FIX)
    digest = extra.get("partition_digest")
    return TrainedRun(path, cfg, record, checkpoint_digest(ckpt),
                      digest if isinstance(digest, str) else None, ckpt)


def model_spec(run: TrainedRun) -> dict[str, Any]:
    """``{"class", "module", "kwargs", "task", ...}``: what rebuilds the run's PyG model.

    Raises:
        ConfigError: A typed run, a graph without features, or sizes out of range.
    """
    part, where = run.record["partition"], run.path / RECORD_FILE
    if not isinstance(part, dict):
        raise ConfigError("partition is not a table.", path=where, field="partition",
                          fix=_FIX)
    wrote = run.config.run.save_predictions or run.config.run.save_embeddings is not None
    fix = (f"read the outputs the run wrote with gnnpar.load_predictions({str(run.path)!r}); "
           "for another graph, train on it with --save-predictions." if wrote else
           "write its outputs by training it again with --save-predictions: gnnpar-train "
           f"--config {run.path / CONFIG_FILE} --save-predictions --overwrite.")
    if part.get("node_types"):
        raise ConfigError("is a typed run: its relation-wise model has no plain PyG "
                          "class, which gnnpar-export and gnnpar-predict write and run.",
                          path=run.path, field="partition.node_types", fix=fix)
    if not part.get("feat_dim"):
        raise ConfigError("trained on a graph without features: its input rows are "
                          "learnt per node, which a PyG module does not hold.", path=run.path,
                          field="partition.feat_dim", fix=fix)
    m, link = run.config.model, run.config.data.task == "link"
    feat = count_field(part, "feat_dim", where, ConfigError, _FIX, low=1, high=1 << 24)
    classes = m.hidden if link else count_field(part, "num_classes", where, ConfigError,
                                                _FIX, low=1, high=1 << 24)
    check_fits((feat + m.hidden * m.layers + classes) * m.hidden * max(1, m.heads),
               PARAMETER_BYTES, what=f"a model of {feat:,} inputs and {classes:,} outputs",
               field="partition.num_classes", fix=_FIX, path=where)
    kwargs: dict[str, Any] = {"in_channels": feat, "hidden_channels": m.hidden,
                              "num_layers": m.layers, "out_channels": classes,
                              "dropout": m.dropout}
    if m.name == "gat":
        kwargs["heads"] = m.heads
    spec: dict[str, Any] = {"class": PYG_CLASSES[m.name], "module": "torch_geometric.nn.models",
                            "kwargs": kwargs, "task": run.config.data.task}
    if link:
        spec["decoder"] = run.config.link.decoder
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


def load_trained(run_dir: str | os.PathLike[str], best: bool = False
                 ) -> tuple[TrainedRun, dict[str, Any], Any, dict[str, Any]]:
    """``(run, spec, PyG model with the trained weights, decoder state)`` of a run.

    The model is built as the trainer builds it (:func:`~gnnpar.models.node.build_model`)
    and given the checkpoint's weights (``best``: the best-valid model's), once every
    name and shape matches.

    Raises:
        ConfigError: What :func:`read_run` and :func:`model_spec` raise, or weights that
            do not fit the model (one line naming the first parameter that differs).
    """
    from gnnpar.models.node import build_model
    from gnnpar.train.checkpoint import read_model_state

    run = read_run(run_dir, best)
    spec = model_spec(run)
    kw = spec["kwargs"]
    model = build_model(run.config.model, kw["in_channels"], kw["out_channels"])
    weights, decoder = plain_state(read_model_state(run.weights))
    want = model.state_dict()
    for name in sorted(set(want) | set(weights)):
        have = tuple(weights[name].shape) if name in weights else None
        need = tuple(want[name].shape) if name in want else None
        if have != need:
            what = ("is missing from the checkpoint" if have is None else
                    "is not a parameter of the run's model" if need is None else
                    f"has shape {list(have)} in the checkpoint, the run's model {list(need)}")
            raise ConfigError(f"parameter {name} {what}: the checkpoint does not fit the run's "
                              "record.", path=run.weights, field=name, fix=_FIX)
    model.load_state_dict(weights)
    return run, spec, model, decoder

