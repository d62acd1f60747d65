"""Dataset spec strings: the one argument every gnnpar CLI takes to name a graph.

Accepted forms (tried in this order)::

    synthetic:sbm                                     the embedded default graph
    synthetic:sbm?nodes=100000&avg_degree=15&classes=16&feat_dim=128&seed=1
    synthetic:sbm?task=link                           the SBM as a link-prediction task
    synthetic:rmat?nodes=1000000&avg_degree=10&a=0.6
    synthetic:typed?papers=2000&authors=1000&venues=40   a typed graph (TypedGraphDataset)
    ogbn-arxiv | ogbn-products | ogbn-papers100M      an OGB dataset under ROOT
    ogbl-citation2 | ogbl-collab | ogbl-ppa           an OGB link dataset under ROOT
    ogbn-mag                                          a typed OGB dataset (reverse relations added)
    path/to/saved-dataset/                            a GraphDataset.save directory (or a
                                                      TypedGraphDataset.save one)
    path/to/meta_dict.json                            an OGB-layout dataset described by JSON
    path/to/graph.npz                                 see from_npz
    path/to/edges.csv | .tsv | .txt (optionally .gz)  see from_edge_list

:func:`load_dataset` also takes what a spec cannot say: ``features=`` / ``labels=`` files
for an edge list, and ``split=``, either ``(train, val, test)`` fractions (a random split
of the labelled nodes, seeded by ``split_seed``) or three files of node ids;
:func:`parse_split` reads the command-line form of ``split`` (``--split 0.6,0.2,0.2`` or
``--split TRAIN,VAL,TEST``).

Typed graphs (``synthetic:typed``, ogbn-mag, a typed ``.npz`` or saved directory) load as
a :class:`~gnnpar.datasets.typed.TypedGraphDataset`; there ``split`` applies to the
target node type (fractions of its labelled nodes, or files of its ids).
"""

from __future__ import annotations

import inspect
import logging
import numbers
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from gnnpar.artifacts.documents import read_json
from gnnpar.datasets.graph import FORMAT, GraphDataset
from gnnpar.datasets.loaders import (
    EDGE_LIST_SUFFIXES,
    from_edge_list,
    from_npz,
    with_split_files,
)
from gnnpar.datasets.ogb import load_ogb
from gnnpar.datasets.splits import check_split_fractions
from gnnpar.datasets.synthetic import rmat, sbm, typed
from gnnpar.datasets.typed import KIND as TYPED_KIND
from gnnpar.datasets.typed import TypedGraphDataset
from gnnpar.errors import DatasetError

DEFAULT_SPEC = "synthetic:sbm"
SYNTHETIC_PREFIX = "synthetic:"
GENERATORS: dict[str, Callable[..., GraphDataset | TypedGraphDataset]] = {
    "sbm": sbm, "rmat": rmat, "typed": typed}
# Short spec keys for the generators' keyword names; the long names work too.
KEY_ALIASES = {"nodes": "num_nodes", "classes": "num_classes", "papers": "num_papers",
               "authors": "num_authors", "venues": "num_venues"}
_OGB_NAME = re.compile(r"ogb[nl]-[A-Za-z0-9_]+")
_FORMS = (
    "'synthetic:sbm[?key=value&...]', 'synthetic:rmat[?...]', 'synthetic:typed[?...]', an "
    "OGB name such as 'ogbn-arxiv', a dataset directory (with dataset.json), an OGB "
    "meta_dict .json, "
    f"a .npz, or an edge list ({', '.join(EDGE_LIST_SUFFIXES)})"
)
SPLIT_ARG_FIX = ("give three fractions train,val,test such as 0.6,0.2,0.2 (each in [0, 1], "
                 "summing to at most 1), or three files of node ids TRAIN,VAL,TEST (.npy, or "
                 "text with one id per line).")
Where = str | os.PathLike[str]
log = logging.getLogger("gnnpar.datasets")


def synthetic_keys(generator: str) -> list[str]:
    """Spec keys a synthetic generator accepts (short aliases first)."""
    names = list(inspect.signature(GENERATORS[generator]).parameters)
    short = {v: k for k, v in KEY_ALIASES.items()}
    return [short.get(n, n) for n in names]


def parse_synthetic(spec: str) -> tuple[str, dict[str, Any]]:
    """Parse ``synthetic:NAME?key=value&...`` into a generator name and its keyword arguments.

    Args:
        spec: The spec string.

    Returns:
        ``(generator name, kwargs)`` with values converted to the generator's types.

    Raises:
        DatasetError: Unknown generator, unknown or repeated key, or a value of the wrong type.
    """
    body = spec[len(SYNTHETIC_PREFIX):]
    gen_name, _, query = body.partition("?")
    if gen_name not in GENERATORS:
        raise DatasetError(f"unknown synthetic generator {gen_name!r}.", path=spec,
                           field="generator", fix=f"use one of {sorted(GENERATORS)}.")
    params = inspect.signature(GENERATORS[gen_name]).parameters
    valid = ", ".join(synthetic_keys(gen_name))
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True) if query else []
    except ValueError as exc:
        raise DatasetError(f"malformed query {query!r} ({exc}).", path=spec, field="query",
                           fix=f"write key=value pairs joined by '&'; valid keys: {valid}."
                           ) from exc
    kwargs: dict[str, Any] = {}
    for key, text in pairs:
        name = KEY_ALIASES.get(key, key)
        if name not in params:
            raise DatasetError(f"unknown key {key!r}.", path=spec, field=key,
                               fix=f"use only these keys: {valid}.")
        if name in kwargs:
            raise DatasetError("key given twice.", path=spec, field=key, fix="give it once.")
        kwargs[name] = _convert(spec, key, text, params[name].default)
    return gen_name, kwargs


def _convert(spec: str, key: str, text: str, default: Any) -> Any:
    """``text`` as the type of ``default``.

    A ``None`` default stands for a float whose default depends on other keys (sbm's
    ``homophily`` and ``feature_noise`` on ``task``).
    """
    if isinstance(default, str):
        return text  # the generator checks the value
    kind = ("comma-separated numbers" if isinstance(default, tuple)
            else "float" if default is None else type(default).__name__)
    try:
        if isinstance(default, tuple):
            return tuple(float(t) for t in text.split(","))
        if isinstance(default, int):
            return int(text)
        return float(text)
    except ValueError:
        raise DatasetError(f"value {text!r} is not {kind}.", path=spec, field=key,
                           fix=f"give {key} as {kind}, e.g. {key}={_example(default)}.") from None


def _example(default: Any) -> str:
    if default is None:
        return "0.5"
    return ",".join(str(v) for v in default) if isinstance(default, tuple) else str(default)


def _is_float(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def parse_split(text: str) -> tuple[float, float, float] | tuple[str, str, str]:
    """Read the command-line form of a split: three fractions or three files.

    ``"0.6,0.2,0.2"`` gives ``(0.6, 0.2, 0.2)`` (checked as by
    :func:`~gnnpar.datasets.splits.check_split_fractions`); ``"train.npy,val.txt,test.txt"``
    gives the three paths (``~`` expanded), each of which must be an existing file of node
    ids (``.npy``, or text with one id per line). File names cannot contain commas.

    Args:
        text: The value, e.g. of ``--split``.

    Returns:
        ``(f_train, f_val, f_test)`` floats, or ``(train, val, test)`` file paths.

    Raises:
        DatasetError: Not three values, fractions out of range, numbers mixed with names,
            or a name that is neither a number nor an existing file (field ``split``).
    """
    tokens = [t.strip() for t in text.split(",")]
    if len(tokens) != 3 or not all(tokens):
        raise DatasetError(f"{text!r} holds {len(tokens)} comma-separated values (some may be "
                           "empty), expected 3.", field="split", fix=SPLIT_ARG_FIX)
    is_number = [_is_float(t) for t in tokens]
    if all(is_number):
        fractions = check_split_fractions([float(t) for t in tokens], fix=SPLIT_ARG_FIX)
        return fractions
    if any(is_number):
        raise DatasetError(f"{text!r} mixes numbers and file names.", field="split",
                           fix=SPLIT_ARG_FIX)
    paths = [str(Path(t).expanduser()) for t in tokens]
    for token, path in zip(tokens, paths, strict=True):
        if not Path(path).is_file():
            raise DatasetError(f"{token!r} is neither a number nor an existing file.",
                               path=path, field="split", fix=SPLIT_ARG_FIX)
    return paths[0], paths[1], paths[2]


def _split_arg(
    split: Sequence[float] | Sequence[Where] | str | None, where: str,
) -> tuple[tuple[float, float, float] | None, tuple[Where, Where, Where] | None]:
    """Classify ``load_dataset``'s ``split``: ``(fractions, None)`` or ``(None, files)``."""
    if split is None:
        return None, None
    if isinstance(split, str):
        split = parse_split(split)
    values: tuple[object, ...] = tuple(split)
    if len(values) == 3:
        reals = [float(v) for v in values
                 if isinstance(v, numbers.Real) and not isinstance(v, bool)]
        if len(reals) == 3:
            return check_split_fractions(reals, where), None
        files = [v for v in values if isinstance(v, str | os.PathLike)]
        if len(files) == 3:
            return None, (files[0], files[1], files[2])
    raise DatasetError(f"{split!r} is neither three fractions nor three files.", path=where,
                       field="split", fix=SPLIT_ARG_FIX)


def load_dataset(
    spec: str,
    root: str | os.PathLike[str] = "data",
    *,
    features: Where | None = None,
    labels: Where | None = None,
    split: Sequence[float] | Sequence[Where] | str | None = None,
    split_seed: int = 0,
    reverse: str = "auto",
) -> GraphDataset | TypedGraphDataset:
    """Turn a dataset spec string into a :class:`GraphDataset` (see the module docstring).

    A typed spec gives a :class:`~gnnpar.datasets.typed.TypedGraphDataset`, whose
    target type ``split`` applies to.

    Args:
        spec: The spec string.
        root: Directory holding OGB datasets (downloaded there when missing and online).
        features: Edge-list specs only: ``.npy`` or CSV/text features, one row per node
            (see :func:`~gnnpar.datasets.loaders.from_edge_list`).
        labels: Edge-list specs only: ``.npy`` or text labels, one integer per node
            (``-1`` = unlabelled).
        split: ``None`` (keep the dataset's split), ``(train, val, test)`` fractions (a
            random split of the labelled nodes, :meth:`GraphDataset.random_split`), or
            three files of node ids (train, val, test); a string is read by
            :func:`parse_split`. Either replaces an existing split (logged at INFO).
        split_seed: Seed of a random split.
        reverse: A typed graph's reverse relations, ``"auto"``, ``"add"`` or ``"none"``
            (:meth:`TypedGraphDataset.with_reverse`; in OGB's layout,
            :func:`~gnnpar.datasets.ogb.load_ogb`'s ``add_reverse``).

    Returns:
        The dataset, validated on every path (synthetic graphs too), so callers need not
        validate it again.

    Raises:
        DatasetError: The spec matches no accepted form, the data behind it is bad,
            ``features`` / ``labels`` were given for a spec that is not an edge list, or
            ``split`` is malformed.

    Example::

        ds = gnnpar.load_dataset("synthetic:sbm?nodes=100000")
        ds = gnnpar.load_dataset("edges.csv", features="x.npy", labels="y.csv",
                                 split=(0.6, 0.2, 0.2), split_seed=1)
    """
    fractions, split_files = _split_arg(split, spec)
    ds, is_edge_list = _open(spec, root, features, labels, split_files, reverse)
    if split_files is not None and not is_edge_list:
        new = with_split_files(ds, split_files)
        _log_replaced(ds, spec, f"the ids in {', '.join(map(str, split_files))}")
        ds = new
    if fractions is not None:
        try:
            new = ds.random_split(fractions, split_seed)
        except DatasetError as exc:
            raise DatasetError(exc.message, path=spec, field=exc.field, fix=exc.fix) from None
        _log_replaced(ds, spec, f"a random split {','.join(map(str, fractions))} (seed "
                      f"{split_seed}, of the labelled nodes)", new, always=True)
        ds = new
    return ds


def _log_replaced(old: GraphDataset | TypedGraphDataset, spec: str, what: str,
                  new: GraphDataset | TypedGraphDataset | None = None,
                  always: bool = False) -> None:
    """Log at INFO the split now in use, and the one it replaced, if any."""
    sizes = [len(getattr(old, f)) for f in ("train_idx", "val_idx", "test_idx")]
    now = "" if new is None else (f": train {len(new.train_idx):,}, val {len(new.val_idx):,}, "
                                  f"test {len(new.test_idx):,}")
    if any(sizes):
        log.info("%s: replaced its split (train %d, val %d, test %d) with %s%s.", spec, *sizes,
                 what, now)
    elif always:
        log.info("%s: %s%s.", spec, what, now)


def _relations(ds: GraphDataset | TypedGraphDataset, reverse: str
               ) -> GraphDataset | TypedGraphDataset:
    """A typed dataset's relations as ``reverse`` says (OGB's loader applies it itself)."""
    return ds.with_reverse(reverse) if isinstance(ds, TypedGraphDataset) else ds


def load_saved(path: Where) -> GraphDataset | TypedGraphDataset:
    """A directory written by :meth:`GraphDataset.save` or :meth:`TypedGraphDataset.save`.

    ``dataset.json``'s ``kind`` (absent: homogeneous) picks the class.
    """
    meta = read_json(Path(path) / "dataset.json", DatasetError)
    if isinstance(meta, dict) and meta.get("kind") == TYPED_KIND:
        return TypedGraphDataset.load(path)
    return GraphDataset.load(path)


def _open(
    spec: str, root: str | os.PathLike[str], features: Where | None, labels: Where | None,
    split_files: tuple[Where, Where, Where] | None, reverse: str = "auto",
) -> tuple[GraphDataset | TypedGraphDataset, bool]:
    """Load the validated dataset ``spec`` names; ``(dataset, whether it is an edge list)``."""

    def not_an_edge_list(form: str) -> None:
        for fld, value, key in (("features", features, "x"), ("labels", labels, "y")):
            if value is not None:
                raise DatasetError(
                    f"{fld} files (--{fld}) apply only to edge-list specs "
                    f"({', '.join(EDGE_LIST_SUFFIXES)}), and this spec is {form}.", path=spec,
                    field=fld, fix=f"put them in the data itself: a .npz with key {key!r}, or "
                    f"a GraphDataset directory with {key}.npy (GraphDataset.save); or give "
                    "the graph as an edge list.")

    if spec.startswith(SYNTHETIC_PREFIX):
        not_an_edge_list("a synthetic graph")
        gen_name, kwargs = parse_synthetic(spec)
        return _relations(GENERATORS[gen_name](**kwargs).validate(spec), reverse), False
    path = Path(spec).expanduser()
    if _OGB_NAME.fullmatch(spec) and not path.exists():
        not_an_edge_list("an OGB dataset")
        return load_ogb(spec, root, add_reverse=reverse), False
    if path.is_dir():
        if (path / "dataset.json").is_file():
            not_an_edge_list("a dataset directory")
            return _relations(load_saved(path), reverse), False
        raise DatasetError("directory holds no dataset.json.", path=path, field="spec",
                           fix=f"pass a directory written by GraphDataset.save, or {_FORMS}.")
    if path.is_file():
        name = path.name.lower()
        if name.endswith(".json"):
            meta = read_json(path, DatasetError)
            if isinstance(meta, dict) and meta.get("format") == FORMAT:
                not_an_edge_list("a dataset directory")
                return _relations(load_saved(path.parent), reverse), False
            not_an_edge_list("an OGB dataset")
            stem = meta.get("name", path.stem) if isinstance(meta, dict) else path.stem
            return load_ogb(str(stem), root, meta_dict=path, add_reverse=reverse), False
        if name.endswith(".npz"):
            not_an_edge_list("a .npz")
            return _relations(from_npz(path), reverse), False
        if name.endswith(EDGE_LIST_SUFFIXES):
            splits = None if split_files is None else dict(
                zip(("train", "val", "test"), split_files, strict=True))
            return from_edge_list(path, features=features, labels=labels, splits=splits), True
        raise DatasetError(f"unrecognised file type {path.suffix!r}.", path=path, field="spec",
                           fix=f"pass {_FORMS}.")
    raise DatasetError("no such file or directory, and not a synthetic or OGB spec.",
                       path=spec, field="spec", fix=f"pass {_FORMS}.")
