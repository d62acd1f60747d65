"""Dataset spec strings: the one argument every gnnpar CLI takes to name a graph.

Accepted forms (tried in this order)::

    synthetic:sbm                                     the embedded default graph
    synthetic:sbm?nodes=100000&avg_degree=15&classes=16&feat_dim=128&seed=1
    synthetic:rmat?nodes=1000000&avg_degree=10&a=0.6
    ogbn-arxiv | ogbn-products | ogbn-papers100M      an OGB dataset under ROOT
    path/to/saved-dataset/                            a GraphDataset.save directory
    path/to/meta_dict.json                            an OGB-layout dataset described by JSON
    path/to/graph.npz                                 see from_npz
    path/to/edges.csv | .tsv | .txt (optionally .gz)  see from_edge_list
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from gnnpar.datasets.graph import FORMAT, GraphDataset
from gnnpar.datasets.loaders import EDGE_LIST_SUFFIXES, from_edge_list, from_npz
from gnnpar.datasets.ogb import load_ogb
from gnnpar.datasets.synthetic import rmat, sbm
from gnnpar.errors import DatasetError
from gnnpar.io import read_json

DEFAULT_SPEC = "synthetic:sbm"
SYNTHETIC_PREFIX = "synthetic:"
GENERATORS: dict[str, Callable[..., GraphDataset]] = {"sbm": sbm, "rmat": rmat}
# Short spec keys for the generators' keyword names; the long names work too.
KEY_ALIASES = {"nodes": "num_nodes", "classes": "num_classes"}
_OGB_NAME = re.compile(r"ogbn-[A-Za-z0-9_]+")
_FORMS = (
    "'synthetic:sbm[?key=value&...]', 'synthetic:rmat[?...]', an OGB name such as "
    "'ogbn-arxiv', a GraphDataset directory (with dataset.json), an OGB meta_dict .json, "
    f"a .npz, or an edge list ({', '.join(EDGE_LIST_SUFFIXES)})"
)


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
    kind = "comma-separated numbers" if isinstance(default, tuple) else type(default).__name__
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
    return ",".join(str(v) for v in default) if isinstance(default, tuple) else str(default)


def load_dataset(spec: str, root: str | os.PathLike[str] = "data") -> GraphDataset:
    """Turn a dataset spec string into a :class:`GraphDataset` (see the module docstring).

    Args:
        spec: The spec string.
        root: Directory holding OGB datasets (downloaded there when missing and online).

    Returns:
        The dataset, validated on every path (synthetic graphs too), so callers need not
        validate it again.

    Raises:
        DatasetError: The spec matches no accepted form, or the data behind it is bad.
    """
    if spec.startswith(SYNTHETIC_PREFIX):
        gen_name, kwargs = parse_synthetic(spec)
        return GENERATORS[gen_name](**kwargs).validate(spec)
    path = Path(spec).expanduser()
    if _OGB_NAME.fullmatch(spec) and not path.exists():
        return load_ogb(spec, root)
    if path.is_dir():
        if (path / "dataset.json").is_file():
            return GraphDataset.load(path)
        raise DatasetError("directory holds no dataset.json.", path=path, field="spec",
                           fix=f"pass a directory written by GraphDataset.save, or {_FORMS}.")
    if path.is_file():
        name = path.name.lower()
        if name.endswith(".json"):
            meta = read_json(path, DatasetError)
            if isinstance(meta, dict) and meta.get("format") == FORMAT:
                return GraphDataset.load(path.parent)
            stem = meta.get("name", path.stem) if isinstance(meta, dict) else path.stem
            return load_ogb(str(stem), root, meta_dict=path)
        if name.endswith(".npz"):
            return from_npz(path)
        if name.endswith(EDGE_LIST_SUFFIXES):
            return from_edge_list(path)
        raise DatasetError(f"unrecognised file type {path.suffix!r}.", path=path, field="spec",
                           fix=f"pass {_FORMS}.")
    raise DatasetError("no such file or directory, and not a synthetic or OGB spec.",
                       path=spec, field="spec", fix=f"pass {_FORMS}.")
