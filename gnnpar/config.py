"""Configuration of a minibatch training run: nested dataclasses, CLI flags over defaults.

:class:`Config` has three sections — :class:`DataConfig` (what to train on),
:class:`ModelConfig` (which PyG model) and :class:`TrainConfig` (how) — each a dataclass
whose fields carry their own docstrings.  Those docstrings are the ``--help`` text of the
flags that :func:`add_config_arguments` generates (one flag per field, ``--batch-size``
for ``train.batch_size``; a few fields have a shorter flag, e.g. ``--model`` for
``model.name``), so the documentation lives in one place::

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    cfg = config_from_args(parser.parse_args()).validate()

:meth:`Config.validate` checks every value before any work starts and raises a
:class:`~gnnpar.errors.ConfigError` naming the field, its flag and the fix.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from dataclasses import dataclass, field, fields
from typing import Any

from gnnpar.datasets.spec import DEFAULT_SPEC
from gnnpar.errors import ConfigError
from gnnpar.partition import METHODS
from gnnpar.sampler import check_fanouts

MODEL_NAMES = ("sage", "gcn", "gat")
_FLAG = "flag"


def _flagged(default: Any, flag: str) -> Any:
    """A field whose CLI flag is ``flag`` rather than the one derived from its name."""
    return field(default=default, metadata={_FLAG: flag})


@dataclass
class DataConfig:
    """What to train on."""

    dataset: str = _flagged(DEFAULT_SPEC, "dataset")
    """Dataset spec (``synthetic:sbm``, ``ogbn-arxiv``, an OGB ``meta_dict`` JSON, ...;
    see ``gnnpar.datasets.load_dataset``) or a partition directory (with ``meta.json``).
    A spec is partitioned first, and the partition is cached under ``ROOT/partitions``."""

    num_parts: int | None = None
    """Parts to split a dataset spec into; must equal the number of processes (the
    default)."""

    partitioner: str = "metis"
    """How a dataset spec is partitioned: ``metis``, ``random`` or ``contiguous``."""

    undirected: bool = False
    """Add every reverse edge (deduplicated) before partitioning a dataset spec, as usual
    for directed citation graphs such as ogbn-arxiv and ogbn-papers100M."""

    root: str = "data"
    """Directory of downloaded datasets and of cached partitions (``ROOT/partitions``)."""

    cache_mb: float = 0.0
    """Per-rank budget of the cache of remote feature rows, in MiB (0: no cache)."""


@dataclass
class ModelConfig:
    """Which PyG model to train."""

    name: str = _flagged("sage", "model")
    """``sage`` (GraphSAGE, mean), ``gcn`` or ``gat``."""

    hidden: int = 128
    """Hidden width."""

    layers: int = 2
    """Message-passing layers (one fan-out per layer)."""

    dropout: float = 0.5
    """Dropout probability after each hidden layer."""

    heads: int = 4
    """Attention heads (``gat`` only); must divide ``hidden``."""


@dataclass
class TrainConfig:
    """How to train."""

    fanouts: tuple[int, ...] = (10, 10)
    """Neighbours sampled per hop, comma-separated (e.g. ``15,10``); one per layer."""

    batch_size: int = 1024
    """Seed nodes per step on each rank."""

    epochs: int = 10
    """Passes over the training nodes."""

    lr: float = 0.005
    """Adam learning rate."""

    weight_decay: float = 0.0
    """Adam weight decay."""

    seed: int = 0
    """Seed of the model's initialisation, the shuffle, the sampler and dropout."""

    eval_batch_size: int = 4096
    """Seed nodes per step on each rank for the sampled validation and test accuracy."""

    eval_every: int = 1
    """Sampled validation and test accuracy every this many epochs (and after the last)."""

    prefetch: bool = True
    """Sample the next batch while the current one trains."""

    out: str = _flagged("runs/train", "out")
    """Run directory: ``record.json`` (the JSON run record) and ``checkpoint/``."""

    resume: bool = False
    """Continue from ``OUT/checkpoint`` when it exists (epoch boundary or mid-epoch)."""

    checkpoint_steps: int = 0
    """Also checkpoint every this many steps within an epoch (0: at epoch ends only)."""

    progress: bool = True
    """Show a progress bar (rank 0)."""

    device: str | None = None
    """``cpu`` or ``cuda`` (default: the GPU of the local rank when there is one)."""

    threads: int | None = None
    """Torch threads per process (default: cores / processes under --nproc, else what
    the launcher set)."""


@dataclass
class Config:
    """A whole training run."""

    data: DataConfig = field(default_factory=DataConfig)
    """What to train on."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """Which model."""

    train: TrainConfig = field(default_factory=TrainConfig)
    """How to train."""

    def validate(self) -> Config:
        """Check every value; return ``self`` or raise :class:`ConfigError`."""
        d, m, t = self.data, self.model, self.train
        _check_choice("data.partitioner", d.partitioner, METHODS)
        _check_choice("model.name", m.name, MODEL_NAMES)
        if d.num_parts is not None:
            _check_int("data.num_parts", d.num_parts, 1)
        _check_number("data.cache_mb", d.cache_mb, 0.0)
        for name in ("hidden", "layers", "heads"):
            _check_int(f"model.{name}", getattr(m, name), 1)
        if not isinstance(m.dropout, (int, float)) or not 0.0 <= m.dropout < 1.0:
            raise _error("model.dropout", m.dropout, "need 0 <= dropout < 1", "0.5")
        if m.name == "gat" and m.hidden % m.heads:
            raise _error("model.hidden", m.hidden, f"GAT needs hidden divisible by heads="
                         f"{m.heads}", str(m.heads * max(1, m.hidden // m.heads)))
        try:
            check_fanouts(t.fanouts)
        except ConfigError:
            raise _error("train.fanouts", t.fanouts, "every fan-out must be an int >= 1",
                         "15,10") from None
        if len(t.fanouts) != m.layers:
            raise ConfigError(
                f"{len(t.fanouts)} fan-outs {list(t.fanouts)} for {m.layers} layers; each "
                "layer aggregates one sampled hop.", field="train.fanouts",
                fix=f"give one fan-out per layer (--fanouts with {m.layers} values) or "
                f"--layers {len(t.fanouts)}.")
        for name in ("batch_size", "epochs", "eval_batch_size", "eval_every"):
            _check_int(f"train.{name}", getattr(t, name), 1)
        _check_int("train.checkpoint_steps", t.checkpoint_steps, 0)
        if t.threads is not None:
            _check_int("train.threads", t.threads, 1)
        _check_number("train.lr", t.lr, 0.0, strict=True)
        _check_number("train.weight_decay", t.weight_decay, 0.0)
        _check_int("train.seed", t.seed, 0)
        if not t.out:
            raise _error("train.out", t.out, "the run directory is empty", "runs/train")
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (for the run record)."""
        return dataclasses.asdict(self)


def _flag(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get(_FLAG, f.name.replace("_", "-")))


def _error(path: str, value: Any, need: str, example: str) -> ConfigError:
    section, name = path.split(".")
    cls = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig}[section]
    flag = next(_flag(f) for f in fields(cls) if f.name == name)
    where = "the positional argument" if flag == "dataset" else f"--{flag}"
    return ConfigError(f"got {value!r}; {need}.", field=path,
                       fix=f"pass {where} {example}.")


def _check_int(path: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _error(path, value, f"need an integer >= {low}", str(max(low, 1)))


def _check_number(path: str, value: Any, low: float, strict: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
        value > low if strict else value >= low)
    if not ok:
        raise _error(path, value, f"need a number {'>' if strict else '>='} {low}", "0.01")


def _check_choice(path: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise _error(path, value, f"need one of {', '.join(choices)}", choices[0])


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of dataclass ``cls`` (empty when absent).

    Args:
        cls: A dataclass defined in a source file.

    Returns:
        ``{field name: docstring}`` with whitespace collapsed and reST backquotes removed.
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for stmt, nxt in zip(body, body[1:], strict=False):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[stmt.target.id] = " ".join(nxt.value.value.replace("``", "").split())
    return docs


def _sections() -> list[tuple[str, type]]:
    hints = typing.get_type_hints(Config)
    return [(f.name, hints[f.name]) for f in fields(Config)]


def _parse_ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not comma-separated integers (e.g. 15,10)") from None


def _argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, dest: str,
              flag: str, hint: Any, default: Any, doc: str) -> None:
    shown = "" if default is None else f" (default: {default})"
    options: dict[str, Any] = {"dest": dest, "default": default, "help": doc + shown,
                               "metavar": dest.split(".")[1].upper()}
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in args if a is not type(None))
    if hint is bool:
        options["action"] = argparse.BooleanOptionalAction
        del options["metavar"]
    elif typing.get_origin(hint) is tuple:
        options.update(type=_parse_ints, metavar="K1,K2,...",
                       help=f"{doc} (default: {','.join(map(str, default))})")
    else:
        options["type"] = hint
    if flag == "dataset":
        options.pop("dest")
        options["nargs"] = "?"
        options["metavar"] = "DATASET_OR_PARTITION_DIR"
        parser.add_argument(dest, **options)
    else:
        parser.add_argument(f"--{flag}", **options)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per configuration field (grouped by section), defaults from the classes.

    Args:
        parser: The parser to extend; flags land in ``dest`` ``"section.field"``.
    """
    for section, cls in _sections():
        group = parser.add_argument_group(section, (cls.__doc__ or "").strip())
        hints = typing.get_type_hints(cls)
        docs = field_docs(cls)
        defaults = cls()
        for f in fields(cls):
            _argument(group, f"{section}.{f.name}", _flag(f), hints[f.name],
                      getattr(defaults, f.name), docs.get(f.name, ""))


def config_from_args(ns: argparse.Namespace) -> Config:
    """Build a :class:`Config` from flags added by :func:`add_config_arguments`.

    Args:
        ns: Parsed arguments.

    Returns:
        The configuration (not yet validated).
    """
    values = vars(ns)
    sections = {}
    for section, cls in _sections():
        sections[section] = cls(**{f.name: values[f"{section}.{f.name}"] for f in fields(cls)})
    return Config(**sections)
