"""Each public name has one home: the module that defines it, and the facade ``gnnpar``.

The public names import as the README shows them (``gnnpar.X``), each class lives in its
role's folder, and no module other than the facade re-exports a class or function of
gnnpar: subpackages' ``__init__`` files re-export nothing, and a module imports a name
only to use it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import gnnpar

# The names of gnnpar's public API, written out: a rename or a lost export fails here.
PUBLIC = {
    "CommStats", "Config", "ConfigError", "DatasetError", "DistConv", "DistContext",
    "DistEmbedding", "DistFeatureStore", "DistGraph", "DistTypedNeighborLoader",
    "DistTypedNeighborSampler", "DistLinkNeighborLoader", "DistNegativeSampler",
    "DistNeighborLoader", "DistNeighborSampler", "DistributedError", "Fanouts", "GnnparError",
    "GraphDataset", "HaloExchange", "HaloGraph", "PartitionConfig", "PartitionError",
    "SamplerOutput", "SparseAdagrad", "SparseAdam", "Trainer", "TypedGraphDataset",
    "__version__", "distribute_convs", "from_pyg", "from_pyg_link", "init", "load_dataset",
    "load_partition", "load_predictions", "negative_destinations", "partition_graph",
    "peer_parts", "ranking_metrics", "shared_negative_hits", "shutdown",
}

ROLES = {
    "gnnpar.sampling": ("DistNeighborSampler", "DistTypedNeighborSampler",
                        "DistNegativeSampler", "SamplerOutput"),
    "gnnpar.loading": ("DistNeighborLoader", "DistLinkNeighborLoader",
                       "DistTypedNeighborLoader"),
    "gnnpar.storage": ("DistGraph", "DistFeatureStore", "DistEmbedding", "SparseAdam",
                       "SparseAdagrad", "peer_parts"),
    "gnnpar.evaluation": ("ranking_metrics", "shared_negative_hits"),
}

FACADE = "gnnpar"
"""The one module allowed to re-export: the documented public API."""


def all_modules() -> dict[str, ModuleType]:
    """Every module of the installed package (the stages ``datasets``/``partition`` too)."""
    import gnnpar.datasets
    import gnnpar.partition

    modules: dict[str, ModuleType] = {}
    for package in (gnnpar, gnnpar.datasets, gnnpar.partition):
        modules[package.__name__] = package
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.rsplit(".", 1)[-1] != "__main__":  # a command line, run on import
                modules[info.name] = importlib.import_module(info.name)
    return modules


def _is_gnnpar_object(obj: object) -> bool:
    return ((inspect.isclass(obj) or inspect.isfunction(obj))
            and (obj.__module__ == FACADE or obj.__module__.startswith(FACADE + ".")))


def _import_bindings(tree: ast.Module) -> dict[str, bool]:
    """Names bound by import statements: ``True`` where bound as ``import x as x``."""
    bound: dict[str, bool] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                redundant = alias.asname is not None and alias.asname == alias.name
                bound[name] = bound.get(name, False) or redundant
    return bound


def _names_read(tree: ast.Module) -> set[str]:
    """Names the module's own code reads (anything but the import statements)."""
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def reexports(modules: dict[str, ModuleType]) -> list[str]:
    """``module.name -> home`` for each class or function a module other than the facade
    re-exports: lists in ``__all__``, binds by other than an import (an alias), imports as
    ``import x as x``, or imports without reading it (kept for others to import)."""
    found = []
    for modname, module in sorted(modules.items()):
        if modname == FACADE:
            continue
        source = inspect.getsource(module) if inspect.getsourcefile(module) else ""
        tree = ast.parse(source)
        imported, read = _import_bindings(tree), _names_read(tree)
        listed = set(getattr(module, "__all__", ()))
        for name, obj in vars(module).items():
            if not _is_gnnpar_object(obj) or obj.__module__ == modname:
                continue
            if (name in listed or name not in imported or imported[name]
                    or name not in read):
                found.append(f"{modname}.{name} -> {obj.__module__}")
    return found


def test_every_public_name_imports_from_gnnpar() -> None:
    assert set(gnnpar.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(gnnpar, name) is not None, name


@pytest.mark.parametrize("name", sorted(PUBLIC - {"__version__"}))
def test_each_public_name_imports_from_its_defining_module(name: str) -> None:
    obj = getattr(gnnpar, name)
    home = obj.__module__
    assert getattr(importlib.import_module(home), name) is obj, (name, home)
    assert gnnpar._LAZY.get(name, "gnnpar.errors") == home, (name, home)


def test_every_public_class_and_function_has_one_home() -> None:
    """Each is importable from the module that defines it, and no other module but the
    facade re-exports it."""
    modules = all_modules()
    for modname, module in modules.items():
        for name, obj in vars(module).items():
            if (not name.startswith("_") and _is_gnnpar_object(obj)
                    and obj.__module__ == modname):
                assert getattr(importlib.import_module(obj.__module__), obj.__name__) is obj
    assert reexports(modules) == []


def test_the_check_finds_planted_reexports(monkeypatch: pytest.MonkeyPatch) -> None:
    """A subpackage that hands out a class, and an alias of a class, are both found."""
    import gnnpar.datasets.graph
    import gnnpar.evaluation
    import gnnpar.models.link
    import gnnpar.typed

    monkeypatch.setattr(gnnpar.evaluation, "LinkDecoder", gnnpar.models.link.LinkDecoder,
                        raising=False)
    monkeypatch.setattr(gnnpar.datasets.graph, "TypedLayout", gnnpar.typed.TypedLayout,
                        raising=False)
    assert reexports(all_modules()) == [
        "gnnpar.datasets.graph.TypedLayout -> gnnpar.typed",
        "gnnpar.evaluation.LinkDecoder -> gnnpar.models.link"]


@pytest.mark.parametrize("package", sorted(ROLES))
def test_each_sampler_loader_store_and_metric_lives_in_its_role_folder(package: str) -> None:
    for name in ROLES[package]:
        obj = getattr(gnnpar, name)
        assert obj.__module__.startswith(package + "."), (name, obj.__module__)


@pytest.mark.parametrize("package", ["gnnpar.evaluation", "gnnpar.loading", "gnnpar.models",
                                     "gnnpar.nn", "gnnpar.parallel", "gnnpar.sampling",
                                     "gnnpar.storage", "gnnpar.train", "gnnpar.datasets",
                                     "gnnpar.partition"])
def test_subpackages_reexport_nothing(package: str) -> None:
    module = importlib.import_module(package)
    assert not hasattr(module, "__all__"), package
    assert [n for n, v in vars(module).items() if _is_gnnpar_object(v)] == [], package
