r"""Real hub-heavy graphs built on this machine without a dataset download.

``python benchmarks/real_graphs.py --cache DIR [--graphs debian,pyimports] [--rebuild]``
builds each graph once into ``DIR/NAME/`` (a :class:`~gnnpar.datasets.graph.GraphDataset`
directory: ``gnnpar-partition DIR/NAME ...`` and ``gnnpar-train DIR/NAME ...`` read it as
it is) and prints its statistics; :func:`load` does the same from Python and returns the
dataset, memory-mapped. A cached graph is rebuilt when its source's fingerprint (the
index files' sizes and times, the builder's version) changes. Keep ``DIR`` out of git.

Both graphs are undirected (each edge stored in both directions, no duplicates, no
self-loops), with float32 features, a class label per node and a seeded random 60/20/20
split; for link prediction, ``GraphDataset.random_link_split`` adds edge splits.

``debian``: the package dependency graph of the Debian archive indices that ``apt-get
update`` leaves in ``/var/lib/apt/lists/*_Packages*`` (plain, ``.lz4``, ``.xz`` or ``.gz``;
``--apt-lists`` picks another directory). A node per binary package (the first stanza of
a name); an edge ``a - b`` when ``a`` ``Depends``, ``Pre-Depends`` or ``Recommends`` ``b``
in any alternative of a clause, where an alternative that names a virtual package links
every package that ``Provides`` it. Features (128): a hashed bag of words (112 buckets,
``log1p`` counts, CRC32 of each token) of the short description, the debtags (``Tag``)
and the package name split at ``-``/``.``/``+``, then ``log1p`` installed size and download
size (in KiB), priority (5), ``Architecture: all``, ``Multi-Arch`` (same, foreign,
allowed), ``Essential``, ``Homepage`` present, 16 in all. Label: the section without its
``contrib/`` or ``non-free/`` prefix, sections of fewer than 100 packages merged into one
class ``(other)``. On bookworm main amd64 (the lists on this machine, 2026-12-03): 63,436
nodes, 307,775 undirected edges (615,550 stored), degree max 21,810 (``libc6``), then
7,441, 6,531, 6,409, 5,104; mean 9.7, 2,850 isolated nodes; 51 classes; built in 3 s.

``pyimports``: the module import graph of this Python's standard library and installed
packages (``sysconfig``'s ``stdlib``, ``purelib`` and ``platlib`` of the base install and
of the running environment; editable checkouts excluded). A node per module (``a/b.py``
is ``a.b``, ``a/__init__.py`` is ``a``; the first root that has a name wins); an edge
``m - t`` for every ``import`` / ``from ... import`` in ``m`` (relative imports resolved,
the target being the longest dotted prefix that is a module, ``from p import name`` going
to ``p.name`` when that is a module). Files that do not parse are nodes without out-going
imports. Features (128): a hashed bag of words (121 buckets) of the top-level functions',
classes' and assignments' names split at ``_`` and of the module docstring's first line,
then ``log1p`` of lines, of top-level functions and of classes, ``__init__``, a ``test`` in
the path, dotted depth, a parse failure, 7 in all. Label: the top-level package (the
standard library is one class, ``(stdlib)``), packages of fewer than 150 modules merged
into ``(other)``. The graph depends on what is installed; on this machine (2026-12-03):
20,227 nodes, 117,872 undirected edges (235,744 stored), degree max 5,242, then 2,838,
2,790, 2,407, 2,172; mean 11.7, 2,737 isolated nodes; 23 classes; built in about 200 s
(parsing every file).
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import lzma
import re
import subprocess
import sys
import sysconfig
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from gnnpar.config import ArgumentParser
from gnnpar.datasets.graph import GraphDataset, symmetrise

BUILDER_VERSION = 1
SPLIT = (0.6, 0.2, 0.2)
FEAT_DIM = 128
APT_LISTS = Path("/var/lib/apt/lists")
_DEP_FIELDS = ("Depends", "Pre-Depends", "Recommends")
_PRIORITIES = ("required", "important", "standard", "optional", "extra")
_MULTI_ARCH = ("same", "foreign", "allowed")
_TOKEN = re.compile(r"[a-z][a-z0-9]+")


# ---------------------------------------------------------------------------- shared parts
def hashed_bag(docs: Sequence[Sequence[str]], width: int) -> np.ndarray:
    """float32 ``[len(docs), width]``: ``log1p`` counts of tokens hashed into ``width`` buckets.

    The hash is CRC32 of the token, the same on every machine and run.
    """
    rows, cols = [], []
    for i, doc in enumerate(docs):
        for token in doc:
            rows.append(i)
            cols.append(zlib.crc32(token.encode()) % width)
    out = np.zeros((len(docs), width), dtype=np.float32)
    np.add.at(out, (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)), 1.0)
    return np.log1p(out)


def class_labels(names: Sequence[str], min_size: int, other: str = "(other)"
                 ) -> tuple[np.ndarray, list[str]]:
    """int64 labels of ``names``, classes ordered by size; those under ``min_size`` merged.

    Returns:
        ``(y, classes)``: a label per name, and the class names by label.
    """
    counts: dict[str, int] = defaultdict(int)
    for name in names:
        counts[name] += 1
    kept = sorted((c for c in counts if counts[c] >= min_size and c != other),
                  key=lambda c: (-counts[c], c))
    classes = kept + ([other] if len(kept) < len(counts) else [])
    index = {c: i for i, c in enumerate(kept)}
    y = np.array([index.get(n, len(kept)) for n in names], dtype=np.int64)
    return y, classes


def graph_dataset(name: str, n: int, pairs: np.ndarray, x: np.ndarray, y: np.ndarray,
                  seed: int = 0) -> GraphDataset:
    """The undirected dataset of ``pairs`` (``[M, 2]``, any order, repeats and loops allowed)."""
    src, dst = symmetrise(n, pairs[:, 0], pairs[:, 1], remove_self_loops=True)
    return GraphDataset(n, src, dst, x=x, y=y, name=name).random_split(SPLIT, seed=seed)


def statistics(ds: GraphDataset) -> dict[str, object]:
    """Nodes, stored and undirected edges, degree figures and classes of a built graph."""
    deg = ds.in_degree()
    top = np.sort(deg)[::-1][:5]
    return {"nodes": ds.num_nodes, "stored_edges": ds.num_edges,
            "undirected_edges": ds.num_edges // 2, "max_degree": int(top[0]),
            "top_degrees": top.tolist(), "mean_degree": round(float(deg.mean()), 2),
            "isolated": int((deg == 0).sum()), "classes": ds.num_classes,
            "feat_dim": ds.feat_dim}


# ------------------------------------------------------------------------------- debian
def apt_package_files(lists: Path = APT_LISTS) -> list[Path]:
    """The ``*_Packages`` index files (any compression) under ``lists``, sorted by name."""
    return sorted(p for p in lists.glob("*_Packages*") if p.is_file()
                  and p.suffix in ("", ".lz4", ".xz", ".gz") and p.name.endswith(
                      ("_Packages", "_Packages.lz4", "_Packages.xz", "_Packages.gz")))


def _read_text(path: Path) -> str:
    if path.suffix == ".xz":
        return lzma.decompress(path.read_bytes()).decode("utf-8", "replace")
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
    if path.suffix == ".lz4":  # no lz4 module in the standard library: apt's own reader
        return subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", str(path)], check=True,
                              capture_output=True).stdout.decode("utf-8", "replace")
    return path.read_text("utf-8", "replace")


def parse_stanzas(text: str) -> Iterator[dict[str, str]]:
    """Yield the fields of each Debian control stanza (continuation lines joined)."""
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = None
        for line in block.splitlines():
            if line[:1] in (" ", "\t"):
                if key is not None:
                    fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if "Package" in fields:
            yield fields


def _alternatives(field: str) -> Iterator[str]:
    """Package names of every alternative of a dependency field (versions, archs dropped)."""
    for clause in field.split(","):
        for alt in clause.split("|"):
            name = alt.strip().split(" ", 1)[0].split(":", 1)[0].split("(", 1)[0]
            if name:
                yield name


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def debian_graph(files: Sequence[Path]) -> GraphDataset:
    """The ``debian`` graph (module docstring) of the given ``Packages`` index files."""
    stanzas: list[dict[str, str]] = []
    index: dict[str, int] = {}
    for path in files:
        for s in parse_stanzas(_read_text(path)):
            if s["Package"] not in index:
                index[s["Package"]] = len(stanzas)
                stanzas.append(s)
    providers: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(stanzas):
        for name in _alternatives(s.get("Provides", "")):
            providers[name].append(i)
    pairs = [(i, t) for i, s in enumerate(stanzas) for f in _DEP_FIELDS
             for name in _alternatives(s.get(f, ""))
             for t in ([index[name]] if name in index else providers.get(name, []))]
    docs = [_tokens(s.get("Description", "").split("\n", 1)[0])
            + s.get("Tag", "").replace(",", " ").split()
            + re.split(r"[-.+]", s["Package"]) for s in stanzas]
    numeric = np.array([
        [np.log1p(float(s.get("Installed-Size", "0") or 0)),
         np.log1p(float(s.get("Size", "0") or 0) / 1024),
         *(s.get("Priority") == p for p in _PRIORITIES),
         s.get("Architecture") == "all",
         *(s.get("Multi-Arch") == m for m in _MULTI_ARCH),
         s.get("Essential") == "yes", "Homepage" in s] for s in stanzas], dtype=np.float32)
    x = np.concatenate([hashed_bag(docs, FEAT_DIM - numeric.shape[1]), numeric], axis=1)
    sections = [s.get("Section", "unknown").rsplit("/", 1)[-1] for s in stanzas]
    y, _ = class_labels(sections, min_size=100)
    return graph_dataset("debian", len(stanzas), np.asarray(pairs, dtype=np.int64), x, y)


# ----------------------------------------------------------------------------- pyimports
def python_roots() -> list[Path]:
    """Standard library and site-packages of the base install and of this environment."""
    roots: list[Path] = []
    for vars_ in ({"base": sys.base_prefix, "platbase": sys.base_prefix},
                  {"base": sys.prefix, "platbase": sys.prefix}):
        paths = sysconfig.get_paths(vars=vars_)
        for key in ("stdlib", "purelib", "platlib"):
            root = Path(paths[key])
            if root.is_dir() and root not in roots:
                roots.append(root)
    return roots


def _module_files(roots: Sequence[Path]) -> dict[str, tuple[Path, Path]]:
    """Dotted module name -> ``(file, root)``, the first root that has the name winning.

    A root inside another (``site-packages`` in the standard library's directory) is
    scanned as itself only.
    """
    modules: dict[str, tuple[Path, Path]] = {}
    for root in roots:
        inner = [r for r in roots if root in r.parents]
        for path in sorted(root.rglob("*.py")):
            if any(r in path.parents for r in inner):
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts and all(p.isidentifier() for p in parts):
                modules.setdefault(".".join(parts), (path, root))
    return modules


def _imports(tree: ast.Module, module: str, is_package: bool) -> Iterator[str]:
    """Dotted names ``module`` imports (relative made absolute; ``p.name`` for from-imports)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_package else module.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join([*pkg, base] if base else pkg)
            yield from (f"{base}.{a.name}" if base else a.name for a in node.names)


def _resolve(name: str, index: dict[str, int]) -> int | None:
    """Index of the longest dotted prefix of ``name`` that is a module."""
    parts = name.split(".")
    while parts:
        hit = index.get(".".join(parts))
        if hit is not None:
            return hit
        parts.pop()
    return None


def _words(tree: ast.Module) -> list[str]:
    names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef,
                                                          ast.AsyncFunctionDef))]
    names += [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Name)]
    doc = (ast.get_docstring(tree) or "").split("\n", 1)[0]
    return [w for n in names for w in _tokens(n.replace("_", " "))] + _tokens(doc)


def pyimports_graph(roots: Sequence[Path]) -> GraphDataset:
    """The ``pyimports`` graph (module docstring) of the modules under ``roots``."""
    files = _module_files(roots)
    names = sorted(files)
    index = {m: i for i, m in enumerate(names)}
    stdlib = Path(sysconfig.get_paths(vars={"base": sys.base_prefix})["stdlib"])
    pairs: list[tuple[int, int]] = []
    docs: list[list[str]] = []
    numeric = np.zeros((len(names), 7), dtype=np.float32)
    labels: list[str] = []
    for i, m in enumerate(names):
        path, root = files[m]
        source = path.read_bytes()
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            tree = None
        is_package = path.name == "__init__.py"
        if tree is not None:
            pairs += [(i, t) for imp in _imports(tree, m, is_package)
                      if (t := _resolve(imp, index)) is not None]
            docs.append(_words(tree))
            funcs = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                        for n in tree.body)
            classes = sum(isinstance(n, ast.ClassDef) for n in tree.body)
        else:
            docs.append([])
            funcs = classes = 0
        numeric[i] = (np.log1p(source.count(b"\n")), np.log1p(funcs), np.log1p(classes),
                      is_package, "test" in m, m.count("."), tree is None)
        labels.append("(stdlib)" if root == stdlib else m.split(".", 1)[0])
    x = np.concatenate([hashed_bag(docs, FEAT_DIM - numeric.shape[1]), numeric], axis=1)
    y, _ = class_labels(labels, min_size=150)
    return graph_dataset("pyimports", len(names), np.asarray(pairs, dtype=np.int64), x, y)


# ------------------------------------------------------------------------------- docrefs
_SECTION = re.compile(r"^[ \t]*See [Aa]lso[ \t]*\n[ \t]*-{3,}[ \t]*\n((?:[ \t]*\S.*\n?)+)", re.M)
_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|obj|attr|data|exc|mod):`[~!]?([\w.]+)")
_DEFAULT_ROLE = re.compile(r"(?<![`\w:])`([A-Za-z_][\w.]*)`(?![`\w])")
_NAME = re.compile(r"[A-Za-z_][\w.]*")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _cited(doc: str) -> Iterator[str]:
    """Dotted names a docstring cites: its numpydoc ``See Also`` entries, Sphinx roles and
    single-backquoted names (numpydoc's default role)."""
    yield from _ROLE.findall(doc)
    yield from _DEFAULT_ROLE.findall(doc)
    for body in _SECTION.findall(doc):
        lines = body.splitlines()
        indent = len(lines[0]) - len(lines[0].lstrip())
        for line in lines:
            if len(line) - len(line.lstrip()) == indent:  # an entry, not its description
                head = line.split(" :", 1)[0].replace("`", "")
                yield from (m.group(0).strip(".") for part in head.split(",")
                            if (m := _NAME.search(_ROLE.sub(r"\1", part.strip()))))


def _documented(tree: ast.Module) -> Iterator[tuple[str, ast.AST, str]]:
    """``(qualified name, node, docstring)`` of the documented functions, classes, methods
    (``Class.method``)."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for node in tree.body:
        if isinstance(node, kinds) and (doc := ast.get_docstring(node)):
            yield node.name, node, doc
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, kinds[:2]) and (doc := ast.get_docstring(member)):
                    yield f"{node.name}.{member.name}", member, doc


def docrefs_graph(roots: Sequence[Path]) -> GraphDataset:
    """The ``docrefs`` graph (module docstring) of the modules under ``roots``."""
    files = _module_files(roots)
    names: list[str] = []  # public dotted name of every documented object
    objects: list[tuple[ast.AST, str, bool]] = []  # node, docstring, whether a method
    for m in sorted(files):
        try:
            tree = ast.parse(files[m][0].read_bytes())
        except (SyntaxError, ValueError):
            continue
        public = ".".join(p for p in m.split(".") if not p.startswith("_"))
        for qual, node, doc in _documented(tree):
            names.append(f"{public}.{qual}" if public else qual)
            objects.append((node, doc, "." in qual))
    # Each object under every dotted suffix of its name, within its top-level package.
    by_suffix: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, name in enumerate(names):
        parts = name.split(".")
        for k in range(1, len(parts)):
            by_suffix[parts[0], ".".join(parts[k:])].append(i)
        by_suffix[parts[0], name].append(i)
    tops = {name.split(".", 1)[0] for name in names}
    pairs: list[tuple[int, int]] = []
    for i, (_, doc, _) in enumerate(objects):
        top, home = names[i].split(".", 1)[0], names[i].rsplit(".", 1)[0]
        for ref in set(_cited(doc)):
            head, _, rest = ref.partition(".")
            key = (head, rest or head) if head in tops and head != ref else (top, ref)
            hits = by_suffix.get(key, [])
            if len(hits) > 1:  # ambiguous: the one beside the citing object, if any
                hits = [j for j in hits if names[j].rsplit(".", 1)[0] == home]
            if len(hits) == 1 and hits[0] != i:
                pairs.append((i, hits[0]))
    used = np.unique(np.asarray(pairs, dtype=np.int64))  # objects that cite or are cited
    remap = np.full(len(names), -1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    docs, numeric, labels = [], np.zeros((len(used), 8), dtype=np.float32), []
    for row, i in enumerate(used.tolist()):
        node, doc, method = objects[i]
        name = names[i]
        short = name.rsplit(".", 1)[-1]
        summary = doc.split("\n\n", 1)[0]
        docs.append(_tokens(summary) + _tokens(_CAMEL.sub(" ", short).replace("_", " ")))
        args = node.args.args if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
            else []
        numeric[row] = (np.log1p(doc.count("\n")), isinstance(node, ast.ClassDef), method,
                        np.log1p(len(args)),
                        "Parameters" in doc or "Args:" in doc, "Example" in doc,
                        name.count("."), short.startswith("_"))
        labels.append(name.split(".", 1)[0])
    x = np.concatenate([hashed_bag(docs, FEAT_DIM - numeric.shape[1]), numeric], axis=1)
    y, _ = class_labels(labels, min_size=200)
    return graph_dataset("docrefs", len(used), remap[np.asarray(pairs, dtype=np.int64)], x, y)


# --------------------------------------------------------------------------------- cache
def _fingerprint_files(paths: Sequence[Path]) -> list[list[object]]:
    return [[str(p), p.stat().st_size, int(p.stat().st_mtime)] for p in paths]


GRAPHS: dict[str, tuple[Callable[[], object], Callable[[], GraphDataset]]] = {
    "debian": (lambda: _fingerprint_files(apt_package_files()),
               lambda: debian_graph(_require_apt_lists())),
    "pyimports": (lambda: [str(r) for r in python_roots()],
                  lambda: pyimports_graph(python_roots())),
    "docrefs": (lambda: [str(r) for r in python_roots()],
                lambda: docrefs_graph(python_roots())),
}
"""Graph name -> (fingerprint of its source, builder)."""


def _require_apt_lists() -> list[Path]:
    files = apt_package_files()
    if not files:
        raise SystemExit(f"no *_Packages index under {APT_LISTS}: run `apt-get update` "
                         "(as root) first.")
    return files


def load(name: str, cache: str | Path, rebuild: bool = False) -> GraphDataset:
    """The graph ``name`` from ``cache/name`` (built there first when absent or stale).

    Args:
        name: A key of :data:`GRAPHS`.
        cache: Directory of built graphs (not in git).
        rebuild: Build again even when the cache is fresh.

    Returns:
        The dataset, arrays memory-mapped from the cache.
    """
    if name not in GRAPHS:
        raise SystemExit(f"unknown graph {name!r}; choose from {sorted(GRAPHS)}.")
    fingerprint, build = GRAPHS[name]
    out = Path(cache) / name
    stamp = {"builder_version": BUILDER_VERSION, "source": fingerprint()}
    stamp_file = out / "real_graph.json"
    fresh = (stamp_file.is_file() and not rebuild
             and json.loads(stamp_file.read_text()).get("stamp") == json.loads(
                 json.dumps(stamp)))
    if not fresh:
        t0 = time.perf_counter()
        ds = build()
        ds.save(out, overwrite=True)
        stats = {**statistics(ds), "build_s": round(time.perf_counter() - t0, 1)}
        stamp_file.write_text(json.dumps({"stamp": stamp, "statistics": stats}, indent=1))
    return GraphDataset.load(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Build (or reuse) the graphs and print their statistics."""
    p = ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache", required=True, type=Path, help="directory of built graphs")
    p.add_argument("--graphs", default=",".join(GRAPHS),
                   help=f"comma-separated, of {','.join(GRAPHS)}")
    p.add_argument("--rebuild", action="store_true", help="build even when cached")
    args = p.parse_args(argv)
    for name in args.graphs.split(","):
        ds = load(name, args.cache, args.rebuild)
        doc = json.loads((args.cache / name / "real_graph.json").read_text())
        print(f"{name}: {json.dumps({**statistics(ds), **doc['statistics']})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
