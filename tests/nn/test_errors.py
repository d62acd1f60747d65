"""Bad input to the gnnpar.nn layers raises one clear ConfigError (one process, no group)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch_geometric.nn import ChebConv, GCNConv, SAGEConv

from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError, PartitionError
from gnnpar.nn.dist_conv import DistConv, HaloGraph
from gnnpar.nn.halo import HaloExchange, HaloPlan
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import load_partition
from gnnpar.partition.writer import partition_graph
from gnnpar.storage.graph import DistGraph
from tests.helpers import nn_cases as cases

CTX = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"),
                  backend="gloo")


@pytest.fixture(scope="module")
def one_part(tmp_path_factory: pytest.TempPathFactory) -> DistGraph:
    out = tmp_path_factory.mktemp("one-part") / "p"
    partition_graph(cases.directed_graph(), out,
                    PartitionConfig(num_parts=1, partitioner="contiguous"))
    return DistGraph.from_partition(load_partition(out, 0))


def test_layers_that_cannot_be_exact_are_refused(one_part: DistGraph) -> None:
    graph = HaloGraph.build(one_part, CTX)
    with pytest.raises(ConfigError, match="several hops"):
        DistConv(ChebConv(4, 4, K=2), graph)
    with pytest.raises(ConfigError, match="not a torch_geometric MessagePassing"):
        DistConv(torch.nn.Linear(4, 4), graph)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="flow"):
        DistConv(SAGEConv(4, 4, flow="target_to_source"), graph)


def test_reducer_switches_are_validated(one_part: DistGraph) -> None:
    plan = HaloPlan.build(one_part, CTX)
    for p in (0.0, 1.5, -0.1):
        with pytest.raises(ConfigError, match="boundary_p"):
            HaloExchange(plan, CTX, boundary_p=p)
    with pytest.raises(ConfigError, match="cannot be combined"):
        HaloExchange(plan, CTX, boundary_p=0.5, stale=True)


def test_wrong_rows_or_edges_are_named(one_part: DistGraph) -> None:
    graph = HaloGraph.build(one_part, CTX)
    layer = DistConv(GCNConv(cases.FEAT, 4), graph)
    x = torch.from_numpy(np.array(one_part.part.feat))
    assert layer(x, graph.edge_index).shape == (one_part.num_owned, 4)
    with pytest.raises(ConfigError, match="rows but this rank owns"):
        layer(x[:-1], graph.edge_index)
    with pytest.raises(ConfigError, match="graph.edge_index"):
        layer(x, graph.edge_index.clone())
    with pytest.raises(ConfigError, match="graph.edge_index"):
        layer(x, graph.edge_index, torch.ones(graph.edge_index.size(1)))


def test_damaged_halo_ids_are_reported(one_part: DistGraph) -> None:
    owned_as_halo = dataclasses.replace(one_part, halo_gids=torch.tensor([0, 1]))
    with pytest.raises(PartitionError, match=r"the part owns itself.*\(parts \[0\]\)"):
        HaloPlan.build(owned_as_halo, CTX)
    unsorted = dataclasses.replace(one_part, halo_gids=torch.tensor([5, 3]))
    with pytest.raises(PartitionError, match="not sorted"):
        HaloPlan.build(unsorted, CTX)
