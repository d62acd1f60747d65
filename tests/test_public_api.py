"""The public names import as the README shows them, and each class lives in its role's folder."""

from __future__ import annotations

import importlib

import pytest

import gnnpar

# The names of gnnpar 0.2's public API, written out: a rename or a lost export fails here.
PUBLIC = {
    "CommStats", "Config", "ConfigError", "DatasetError", "DistConv", "DistContext",
    "DistEmbedding", "DistFeatureStore", "DistGraph", "DistHeteroNeighborLoader",
    "DistHeteroNeighborSampler", "DistLinkNeighborLoader", "DistNegativeSampler",
    "DistNeighborLoader", "DistNeighborSampler", "DistributedError", "Fanouts", "GnnparError",
    "GraphDataset", "HaloExchange", "HaloGraph", "HeteroGraphDataset", "PartitionConfig",
    "PartitionError", "SamplerOutput", "SparseAdagrad", "SparseAdam", "Trainer", "__version__",
    "distribute_convs", "from_pyg", "from_pyg_link", "init", "load_dataset", "load_partition",
    "load_predictions", "negative_destinations", "partition_graph", "ranking_metrics",
    "shared_negative_hits", "shutdown",
}

ROLES = {
    "gnnpar.sampling": ("DistNeighborSampler", "DistHeteroNeighborSampler",
                        "DistNegativeSampler", "SamplerOutput"),
    "gnnpar.loading": ("DistNeighborLoader", "DistLinkNeighborLoader",
                       "DistHeteroNeighborLoader"),
    "gnnpar.storage": ("DistGraph", "DistFeatureStore", "DistEmbedding", "SparseAdam",
                       "SparseAdagrad"),
}


def test_every_public_name_imports_from_gnnpar() -> None:
    assert set(gnnpar.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(gnnpar, name) is not None, name


@pytest.mark.parametrize("package", sorted(ROLES))
def test_each_sampler_loader_and_store_lives_in_its_role_folder(package: str) -> None:
    for name in ROLES[package]:
        cls = getattr(gnnpar, name)
        assert cls.__module__.startswith(package + "."), (name, cls.__module__)
        assert getattr(importlib.import_module(package), name) is cls


@pytest.mark.parametrize("package", ["gnnpar.hetero", "gnnpar.link", "gnnpar.nn",
                                     "gnnpar.parallel", "gnnpar.sampling", "gnnpar.loading",
                                     "gnnpar.storage"])
def test_each_package_exports_what_it_lists(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, (package, name)
