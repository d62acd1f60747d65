"""One configuration system for every command: nested dataclasses, CLI > file > defaults.

A command's configuration is a dataclass whose fields are *sections*, each a dataclass
whose fields carry their own docstrings (torchtitan's ``JobConfig`` shape)::

    @dataclass
    class DataConfig:
        dataset: str = option("synthetic:sbm", flag="dataset")
        \"\"\"Dataset spec.\"\"\"

Every field becomes one command-line flag (``--batch-size`` for ``sample.batch_size``,
unless :func:`option` names another), its docstring the flag's help, so the
documentation lives in one place.  Values come from three places, the later winning:

1. the dataclass defaults;
2. a TOML or JSON file given with ``--config FILE`` (sections as tables / objects,
   e.g. ``[sample]`` ``fanouts = [15, 10]``); a run's ``OUT/config.json`` is such a file;
3. the flags given on the command line.

:func:`parse_config` returns the configuration and the set of ``section.field`` paths
that the command line or the file set explicitly, so a command can refuse a flag that
does not apply to the chosen mode.  Nothing here imports torch: ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import inspect
import json
import sys
import textwrap
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import field, fields
from pathlib import Path
from typing import Any, TypeVar

from gnnpar.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

T = TypeVar("T")
_FLAG = "flag"
CONFIG_FLAG = "--config"


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line with a fix, like gnnpar's own.

    A misspelt flag names the closest ones (``--learning-rate``: did you mean ``--lr``?);
    the exit status stays argparse's 2.  A flag's prefix is not the flag
    (``allow_abbrev=False``): ``--fanout`` is refused, not taken as ``--fanouts``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:  # noqa: D102
        fix = f"see {self.prog} --help."
        if message.startswith(("unrecognized arguments:", "ambiguous option:")):
            given = [a.split("=", 1)[0] for a in message.split(":", 1)[1].split()
                     if a.startswith("-")]
            known = [o for a in self._actions for o in a.option_strings]
            respelt = [(g, g.replace("_", "-")) for g in given
                       if "_" in g and g.replace("_", "-") in known]
            if respelt:  # one spelling: kebab-case
                old, new = respelt[0]
                self.exit(2, f"{self.prog}: error: {old} is spelt {new} (flags are "
                          f"kebab-case). Fix: pass {new}.\n")
            close = sorted({c for g in given for c in [
                *difflib.get_close_matches(g, known, n=3, cutoff=0.7),
                *[k for k in known if k == "--" + "".join(  # --learning-rate: --lr
                    w[:1] for w in g.lstrip("-").split("-"))]]})
            if close:
                fix = f"did you mean {' or '.join(close)}? (see {self.prog} --help)"
        self.exit(2, f"{self.prog}: error: {message}. Fix: {fix}\n")


MODE_DEFAULTS = ("full",)
"""The keys of :func:`task_default` that name a mode (``--mode full``), not a task."""


class TaskDefault:
    """A field default that depends on the run's task or mode: see :func:`task_default`.

    Attributes:
        by_task: ``{task or mode: value}``; a run whose mode and task are not in it takes
            the ``node`` value.
    """

    by_task: dict[str, Any]

    def for_run(self, task: str, mode: str) -> Any:
        """The plain value (no longer marked) of a run of ``task`` in ``mode``.

        The mode's value when it has one, else the task's, else the node task's.
        """
        value = self.by_task.get(mode, self.by_task.get(task, self.by_task["node"]))
        return type(value)(value)

    def shown(self) -> str:
        """The default as ``--help`` shows it: each value with the flag that selects it."""
        tasks = [k for k in self.by_task if k not in MODE_DEFAULTS]
        return ", ".join(
            f"{_shown(v)} with " + (f"--mode {key}" if key in MODE_DEFAULTS else
                                    f"--task {key}" if len(tasks) > 1 else "--mode sample")
            for key, v in self.by_task.items())


class _TaskFloat(TaskDefault, float):
    pass


class _TaskInt(TaskDefault, int):
    pass


class _TaskTuple(TaskDefault, tuple):  # type: ignore[type-arg]
    pass


_MARKED: dict[type, type[TaskDefault]] = {float: _TaskFloat, int: _TaskInt, tuple: _TaskTuple}


def task_default(node: T, **others: T) -> T:
    """A field default of ``node`` for node tasks and ``others[task]`` for the others.

    ``dropout: float = task_default(0.5, link=0.0)`` declares 0.5 for ``--task node`` and
    0.0 for ``--task link``; ``--help`` shows both.  A key of :data:`MODE_DEFAULTS` names
    a mode instead, whose value wins over the task's: ``task_default(10, full=200)`` is
    200 for ``--mode full``.  The default is ``node`` itself (a float, an int or a tuple),
    marked as not given: a section read on its own holds the node value, and
    :func:`resolve_task_defaults` (the configuration's ``validate``) replaces every marked
    value with the run's, while a value given by a flag, a file or in Python stays as
    given.
    """
    cls = _MARKED.get(type(node))
    if cls is None or any(type(v) is not type(node) for v in others.values()):
        raise TypeError(f"task_default takes floats, ints or tuples of one type, got {node!r} "
                        f"and {others!r}")
    out: Any = cls(node)  # type: ignore[call-arg]
    out.by_task = {"node": node, **others}
    return typing.cast(T, out)


def resolve_task_defaults(config: T, task: str, mode: str = "sample") -> T:
    """A copy of ``config`` (sections of dataclasses), its task defaults a ``task`` run's.

    Those of ``mode`` win where a default has one (:data:`MODE_DEFAULTS`).
    """
    changes = {}
    for f in fields(config):  # type: ignore[arg-type]
        section = getattr(config, f.name)
        values = {g.name: getattr(section, g.name).for_run(task, mode) for g in fields(section)
                  if isinstance(getattr(section, g.name), TaskDefault)}
        if values:
            changes[f.name] = dataclasses.replace(section, **values)
    return dataclasses.replace(config, **changes)  # type: ignore[type-var]


def _shown(value: Any) -> str:
    """A default as typed on the command line (lists joined by commas)."""
    if isinstance(value, tuple):
        return ",".join(map(str, value)) if value else "none"
    return "none" if value is None else str(value)


def option(default: Any, *, flag: str | None = None, const: Any = None,
           metavar: str | None = None) -> Any:
    """A field with default ``default`` and the flag ``--flag`` instead of its name's.

    ``flag="dataset"`` makes the field the positional argument; ``const``: the flag's
    value may be left out, and is then ``const`` (``--save-embeddings [LAYER]``);
    ``metavar``: the value's name in ``--help``.
    """
    metadata = {_FLAG: flag, "const": const, "metavar": metavar}
    return field(default=default, metadata={k: v for k, v in metadata.items() if v is not None})


def flag_of(cls: type, name: str) -> str:
    """The command-line spelling of field ``name`` of section ``cls``.

    Returns:
        ``"--batch-size"`` for a flag, or ``"the positional DATASET"`` for the positional.
    """
    f = next((f for f in fields(cls) if f.name == name), None)
    if f is None:
        raise KeyError(f"{cls.__name__} has no field {name!r}")
    flag = str(f.metadata.get(_FLAG, f.name.replace("_", "-")))
    return "the positional DATASET" if flag == "dataset" else f"--{flag}"


def config_error(section: type, path: str, value: Any, need: str, example: str) -> ConfigError:
    """A :class:`ConfigError` for field ``path`` (``"sample.batch_size"``) naming its flag.

    Args:
        section: The section dataclass holding the field.
        path: ``"section.field"``.
        value: The offending value.
        need: What a valid value is.
        example: A valid value, as typed on the command line.
    """
    flag = flag_of(section, path.rsplit(".", 1)[1])
    where = flag if flag.startswith("the ") else f"{flag} {example}"
    return ConfigError(f"got {value!r}; {need}.", field=path, fix=f"pass {where}.")


def check_int(section: type, path: str, value: Any, low: int) -> None:
    """Raise unless ``value`` is an int ``>= low`` (bools are not ints here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise config_error(section, path, value, f"need an integer >= {low}", str(max(low, 1)))


def check_number(section: type, path: str, value: Any, low: float, strict: bool = False,
                 high: float | None = None) -> None:
    """Raise unless ``value`` is a finite number ``>= low`` (``> low`` when ``strict``)."""
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and value == value and abs(value) != float("inf")
          and (value > low if strict else value >= low)
          and (high is None or value <= high))
    if not ok:
        bound = f"{'>' if strict else '>='} {low}" + (f" and <= {high}" if high else "")
        raise config_error(section, path, value, f"need a finite number {bound}", "0.01")


def check_choice(section: type, path: str, value: Any, choices: Sequence[str]) -> None:
    """Raise unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise config_error(section, path, value, f"need one of {', '.join(choices)}",
                           choices[0])


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


def sections(root: type) -> dict[str, type]:
    """``{section name: section dataclass}`` of a configuration dataclass."""
    hints = typing.get_type_hints(root)
    return {f.name: hints[f.name] for f in fields(root)}


def _plain(hint: Any) -> Any:
    """``X`` for ``X | None``; the hint itself otherwise."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def _optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in \
        typing.get_args(hint)


def _list_parser(item: type) -> Any:
    def parse(text: str) -> tuple[Any, ...]:
        try:
            return tuple(item(t.strip()) for t in text.split(",") if t.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not comma-separated {item.__name__} values "
                f"(e.g. {'15,10' if item is int else 'a,b'})") from None
    return parse


def _add_flag(group: argparse._ArgumentGroup, path: str, f: dataclasses.Field[Any],
              hint: Any, default: Any, doc: str, positional: bool) -> None:
    kind = _plain(hint)
    flag = str(f.metadata.get(_FLAG, f.name.replace("_", "-")))
    shown = _shown(default)
    if isinstance(default, TaskDefault):
        shown = default.shown()
    text = doc if "(default:" in doc else f"{doc} (default: {shown})"
    options: dict[str, Any] = {"dest": path, "default": argparse.SUPPRESS,
                               "help": text.replace("%", "%%")}  # argparse formats help
    if kind is bool:
        options["action"] = argparse.BooleanOptionalAction
    elif typing.get_origin(kind) is tuple:
        options.update(type=_list_parser(typing.get_args(kind)[0]), metavar="A,B,...")
    else:
        options.update(type=kind, metavar=f.metadata.get("metavar", f.name.upper()))
    if "const" in f.metadata:
        options.update(nargs="?", const=f.metadata["const"])
    if flag == "dataset" and positional:
        del options["dest"]
        options["metavar"] = "DATASET"
        group.add_argument(path, nargs="?", **options)
    else:
        group.add_argument(f"--{flag}", **options)


def command_flags(section: Any, skip: Sequence[str] = ()) -> list[str]:
    """The flags that give ``section``'s values that differ from its defaults.

    The inverse of the flags :func:`add_config_arguments` adds: ``--flag VALUE`` (lists
    joined by commas, booleans as ``--flag`` / ``--no-flag``), the positional first,
    fields in ``skip`` left out; ready for ``shlex.join``.
    """
    defaults = type(section)()
    positional: list[str] = []
    flags: list[str] = []
    for f in fields(section):
        value = getattr(section, f.name)
        if f.name in skip or value == getattr(defaults, f.name):
            continue
        flag = flag_of(type(section), f.name)
        if flag.startswith("the positional"):
            positional.append(str(value))
        elif isinstance(value, bool):
            flags.append(flag if value else f"--no-{flag[2:]}")
        elif value == f.metadata.get("const", ...):
            flags.append(flag)
        elif isinstance(value, tuple | list):
            flags += [flag, ",".join(map(str, value))]
        else:
            flags += [flag, str(value)]
    return positional + flags


def add_config_arguments(parser: argparse.ArgumentParser, root: type,
                         positional: bool = True) -> None:
    """Add ``--config FILE`` and one flag per field of every section of ``root``.

    Args:
        parser: The parser to extend; a field's value lands in ``dest`` ``"section.field"``
            only when the flag is given (defaults are applied by :func:`parse_config`).
        root: The configuration dataclass (fields = sections).
        positional: The field whose flag is ``"dataset"`` is the positional argument;
            ``False`` makes it ``--dataset`` (for a command whose positional is another).
    """
    parser.add_argument(CONFIG_FLAG, metavar="FILE", default=None,
                        help="TOML or JSON file of settings by section (e.g. a run's "
                        "OUT/config.json); flags given on the command line win over it")
    for name, cls in sections(root).items():
        summary = (cls.__doc__ or "").strip().split("\n\n", 1)[0]  # its first paragraph
        group = parser.add_argument_group(name, summary)
        hints = typing.get_type_hints(cls)
        docs = field_docs(cls)
        defaults = cls()
        for f in fields(cls):
            _add_flag(group, f"{name}.{f.name}", f, hints[f.name], getattr(defaults, f.name),
                      docs.get(f.name, ""), positional)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML (``.toml``) or JSON file of sections; a run record's ``config`` too.

    Raises:
        ConfigError: Missing, unreadable or not a table of sections.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError("config file is missing.", path=p, field=CONFIG_FLAG,
                          fix="pass the path of a .toml or .json file.")
    try:
        text = p.read_text()
        doc = tomllib.loads(text) if p.suffix.lower() == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"cannot be parsed ({exc}).", path=p, field=CONFIG_FLAG,
                          fix="write TOML (.toml) or JSON with one table per section.") from None
    if isinstance(doc, dict) and doc.get("format") == "gnnpar-run":
        doc = doc.get("config", {})  # a run record: repeat its configuration
    if not isinstance(doc, dict):
        raise ConfigError("must hold a table of sections.", path=p, field=CONFIG_FLAG,
                          fix="write e.g. '[sample]' then 'fanouts = [15, 10]'.")
    return doc


def _coerce(value: Any, hint: Any, where: str, key: str) -> Any:
    """A value read from a file, checked against the field's type."""
    if value is None and _optional(hint):
        return None
    kind = _plain(hint)
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        if isinstance(value, (list, tuple)) and all(
                isinstance(v, item) and not isinstance(v, bool) for v in value):
            return tuple(value)
    elif kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    elif isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
        return value
    raise ConfigError(f"got {value!r} ({type(value).__name__}); expected "
                      f"{getattr(kind, '__name__', kind)}.", path=where, field=key,
                      fix="give a value of the field's type (see --help).")


def from_dict(root: type[T], doc: Mapping[str, Any], where: str = "config") -> T:
    """Build ``root`` from nested ``{section: {field: value}}``; defaults for the rest.

    Raises:
        ConfigError: An unknown section or field, or a value of the wrong type, naming
            ``where`` and ``section.field``.
    """
    secs = sections(root)
    values: dict[str, Any] = {}
    for name, body in doc.items():
        if name not in secs:
            raise ConfigError("unknown section.", path=where, field=str(name),
                              fix=f"use only the sections {', '.join(secs)}.")
        if not isinstance(body, Mapping):
            raise ConfigError("must be a table of fields.", path=where, field=str(name),
                              fix=f"write [{name}] then 'field = value' lines.")
        hints = typing.get_type_hints(secs[name])
        kwargs = {}
        for key, value in body.items():
            if key not in hints:
                raise ConfigError("unknown field.", path=where, field=f"{name}.{key}",
                                  fix=f"use only the fields of [{name}]: {', '.join(hints)}.")
            kwargs[key] = _coerce(value, hints[key], where, f"{name}.{key}")
        values[name] = secs[name](**kwargs)
    return root(**values)


def to_dict(config: Any) -> dict[str, Any]:
    """Plain nested dict of a configuration (JSON-able; tuples become lists)."""
    doc: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(config)))
    return doc


def parse_config(parser: argparse.ArgumentParser, root: type[T],
                 argv: Sequence[str] | None = None,
                 defaults: Mapping[str, Any] | None = None
                 ) -> tuple[T, argparse.Namespace, set[str]]:
    """Parse ``argv``: dataclass defaults, then ``defaults``, the ``--config`` file, flags.

    Args:
        parser: A parser extended by :func:`add_config_arguments` (and any other flags).
        root: The configuration dataclass.
        argv: Arguments without the program name (default ``sys.argv[1:]``).
        defaults: ``{"section.field": value}`` overriding the dataclass defaults (an
            example script's own defaults), themselves overridden by file and flags.

    Returns:
        ``(config, namespace, explicit)``: the configuration (not yet validated), the
        parsed namespace (for flags that are not configuration), and the
        ``section.field`` paths set by the file or the command line.
    """
    ns = parser.parse_args(argv)
    doc: dict[str, dict[str, Any]] = {}
    for path, value in (defaults or {}).items():
        name, key = path.split(".")
        doc.setdefault(name, {})[key] = value
    explicit: set[str] = set()
    config_path = getattr(ns, "config", None)
    if config_path:
        for name, body in load_config_file(config_path).items():
            if isinstance(body, Mapping):
                explicit.update(f"{name}.{k}" for k in body)
                doc.setdefault(name, {}).update(body)
            else:
                doc[name] = body
    for path, value in vars(ns).items():
        if path.count(".") == 1 and path.split(".")[0] in sections(root):
            name, key = path.split(".")
            doc.setdefault(name, {})[key] = value
            explicit.add(path)
    return from_dict(root, doc, str(config_path or "command line")), ns, explicit
