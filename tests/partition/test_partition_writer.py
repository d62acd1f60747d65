"""partition_graph on hand-checked graphs: exact arrays, determinism, options, bad input;
partition_dataset: the load -> check -> partition sequence."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import numpy as np
import pytest

import gnnpar.partition.writer as writer
from gnnpar.datasets.config import DataConfig
from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.synthetic import sbm
from gnnpar.errors import ConfigError, DatasetError, PartitionError
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import load_partition
from gnnpar.partition.stages import StageMeter
from gnnpar.partition.writer import partition_dataset, partition_graph


def tiny() -> GraphDataset:
    # 0 <-> 1 (0 -> 1 twice), 1 -> 2, 2 -> 2 (loop), 2 -> 3, 3 -> 4 -> 5 -> 3.
    src = np.array([0, 1, 1, 2, 3, 4, 5, 2, 0])
    dst = np.array([1, 0, 2, 3, 4, 5, 3, 2, 1])
    return GraphDataset(num_nodes=6, src=src, dst=dst,
                        x=np.arange(12, dtype=np.float32).reshape(6, 2),
                        y=np.array([0, 1, 2, 0, 1, 2]), train_idx=np.array([0, 4]),
                        val_idx=np.array([1]), test_idx=np.array([5]), name="tiny")


def arrays(out: Path, k: int) -> dict[str, list]:
    p = load_partition(out, k)
    return {name: np.asarray(getattr(p, name)).tolist() for name in (
        "orig_ids", "halo_gids", "indptr", "indices", "in_degree", "adj_complete", "label",
        "train_idx", "val_idx", "test_idx", "e_id")}


def test_tiny_graph_contiguous_by_hand(tmp_path: Path) -> None:
    meta = partition_graph(tiny(), tmp_path / "p",
                           PartitionConfig(num_parts=2, partitioner="contiguous"))
    assert meta.offsets == (0, 3, 6) and meta.num_edges == 9
    none = {"num_train_edges": 0, "num_val_edges": 0, "num_test_edges": 0}
    assert meta.parts == ({"num_owned": 3, "num_halo": 0, "num_edges": 5, **none},
                          {"num_owned": 3, "num_halo": 1, "num_edges": 4, **none})
    assert arrays(tmp_path / "p", 0) == {
        "orig_ids": [0, 1, 2], "halo_gids": [], "indptr": [0, 1, 3, 5],
        "indices": [1, 0, 0, 1, 2], "in_degree": [1, 2, 2], "adj_complete": [True] * 3,
        "label": [0, 1, 2], "train_idx": [0], "val_idx": [1], "test_idx": [],
        "e_id": [1, 0, 8, 2, 7]}  # the positions in src/dst of those in-edges
    # Node 3's in-edges come from 2 (halo, local 3) and 5 (local 2).
    assert arrays(tmp_path / "p", 1) == {
        "orig_ids": [3, 4, 5], "halo_gids": [2], "indptr": [0, 2, 3, 4, 4],
        "indices": [3, 2, 0, 1], "in_degree": [2, 1, 1, 2],
        "adj_complete": [True, True, True, False], "label": [0, 1, 2], "train_idx": [1],
        "val_idx": [], "test_idx": [2], "e_id": [3, 6, 4, 5]}
    feat = np.load(tmp_path / "p" / "part-1" / "feat.npy")
    assert feat.tolist() == [[6, 7], [8, 9], [10, 11]]
    q = meta.quality
    assert q["edge_cut"] == 1 and q["per_part"]["halo"] == [0, 1]
    assert q["replication_factor"] == pytest.approx(7 / 6)


def test_tiny_graph_two_hop_halo_by_hand(tmp_path: Path) -> None:
    partition_graph(tiny(), tmp_path / "p",
                    PartitionConfig(num_parts=2, partitioner="contiguous", halo_hops=2))
    # Halo of part 1: node 2 (1 hop, its in-edges 1 -> 2 and 2 -> 2 stored) and node 1.
    got = arrays(tmp_path / "p", 1)
    assert got["halo_gids"] == [1, 2]
    assert got["indptr"] == [0, 2, 3, 4, 4, 6]
    assert got["indices"] == [4, 2, 0, 1, 3, 4]
    assert got["in_degree"] == [2, 1, 1, 2, 2]  # node 1 has 0 -> 1 twice
    assert got["adj_complete"] == [True, True, True, False, True]


def test_renumbering_follows_the_assignment(tmp_path: Path) -> None:
    meta = partition_graph(tiny(), tmp_path / "p", PartitionConfig(num_parts=3),
                           assignment=np.array([2, 0, 2, 1, 0, 1]))
    assert meta.offsets == (0, 2, 4, 6)
    assert [arrays(tmp_path / "p", k)["orig_ids"] for k in range(3)] == [[1, 4], [3, 5], [0, 2]]


def test_reruns_are_byte_identical(tmp_path: Path) -> None:
    ds = sbm(num_nodes=600, avg_degree=8, num_classes=4, feat_dim=8, seed=1)
    for method in ("metis", "random"):
        a, b = tmp_path / f"{method}-a", tmp_path / f"{method}-b"
        partition_graph(ds, a, PartitionConfig(num_parts=3, partitioner=method, seed=7))
        partition_graph(ds, b, PartitionConfig(num_parts=3, partitioner=method, seed=7))
        files = sorted(str(f.relative_to(a)) for f in a.rglob("*") if f.is_file())
        assert files == sorted(str(f.relative_to(b)) for f in b.rglob("*") if f.is_file())
        assert len(files) == 1 + 3 * 18
        _, mismatch, errors = filecmp.cmpfiles(a, b, files, shallow=False)
        assert not mismatch and not errors
    other = partition_graph(ds, tmp_path / "random-c",
                            PartitionConfig(num_parts=3, partitioner="random", seed=8))
    assert other.offsets == partition_graph(
        ds, tmp_path / "random-d", PartitionConfig(num_parts=3, partitioner="random", seed=8)
    ).offsets
    assert not filecmp.cmp(tmp_path / "random-a" / "part-0" / "orig_ids.npy",
                           tmp_path / "random-c" / "part-0" / "orig_ids.npy", shallow=False)


def test_graph_without_features_labels_or_training_nodes(tmp_path: Path) -> None:
    ds = GraphDataset(num_nodes=40, src=np.arange(39), dst=np.arange(1, 40))
    meta = partition_graph(ds, tmp_path / "p", PartitionConfig(num_parts=4))
    assert meta.feat_dim == 0 and meta.num_classes == 0
    # No training nodes: the default's "train" and "sampled" are dropped, nodes balanced.
    sizes = np.diff(meta.offsets)
    assert {k: meta.partitioner[k] for k in ("method", "seed", "balance", "imbalance")} == {
        "method": "metis", "seed": 0, "balance": ["nodes"],
        "imbalance": {"nodes": sizes.max() / sizes.mean()}}
    p = load_partition(tmp_path / "p", 2)
    assert p.feat.shape == (p.num_owned, 0) and p.feat.dtype == np.float32
    assert (np.asarray(p.label) == -1).all()


def test_balance_choice_is_recorded(tmp_path: Path) -> None:
    config = PartitionConfig(num_parts=2, balance=["nodes", "nodes"])  # type: ignore[arg-type]
    assert config.balance == ("nodes", "nodes")  # a list is kept as a tuple
    meta = partition_graph(tiny(), tmp_path / "p", config)
    assert meta.partitioner["balance"] == ["nodes"]


def test_config_is_checked_before_the_dataset_is_read(tmp_path: Path) -> None:
    broken = GraphDataset(num_nodes=2, src=np.array([0]), dst=np.array([5]))  # no node 5
    with pytest.raises(ConfigError) as exc:
        partition_graph(broken, tmp_path / "p", PartitionConfig(num_parts=2, halo_hops=0))
    assert exc.value.field == "partition.halo_hops" and "--halo-hops" in str(exc.value.fix)


@pytest.mark.parametrize("kwargs, error, field", [
    ({"config": PartitionConfig(num_parts=0)}, ConfigError, "partition.num_parts"),
    ({"config": PartitionConfig(num_parts=7)}, ConfigError, "partition.num_parts"),
    ({"config": PartitionConfig()}, ConfigError, "partition.num_parts"),
    ({"config": PartitionConfig(num_parts=2, partitioner="kmeans")}, ConfigError,
     "partition.partitioner"),
    ({"config": PartitionConfig(num_parts=2, balance=("nodes", "memory"))}, ConfigError,
     "partition.balance"),
    ({"config": PartitionConfig(num_parts=2, balance=())}, ConfigError, "partition.balance"),
    ({"config": PartitionConfig(num_parts=2, balance="nodes")}, ConfigError,  # type: ignore[arg-type]
     "partition.balance"),
    ({"config": PartitionConfig(num_parts=2, halo_hops=0)}, ConfigError, "partition.halo_hops"),
    ({"config": PartitionConfig(num_parts=2, memory_budget=0.0005)}, ConfigError,
     "partition.memory_budget"),
    ({"config": PartitionConfig(num_parts=2, workers=0)}, ConfigError, "partition.workers"),
    ({"config": PartitionConfig(num_parts=2, feature_dtype="int8")}, ConfigError,
     "partition.feature_dtype"),
    ({"task": "graph"}, ConfigError, "task"),
    ({"assignment": np.zeros(5, dtype=np.int64)}, PartitionError, "assignment"),
    ({"assignment": np.array([0, 1, 2, 0, 1, 1])}, PartitionError, "assignment"),
    ({"assignment": np.array([0, 0, 0, 0, 0, 0])}, PartitionError, "assignment"),
    ({"assignment": np.array([0.0, 1, 0, 1, 0, 1])}, PartitionError, "assignment"),
])
def test_bad_arguments_raise_one_clear_error(tmp_path: Path, kwargs: dict, error: type,
                                             field: str) -> None:
    args = {"config": PartitionConfig(num_parts=2), **kwargs}
    with pytest.raises(error) as exc:
        partition_graph(tiny(), out_dir=tmp_path / "p", **args)
    assert exc.value.field == field and exc.value.fix
    assert isinstance(exc.value, ValueError)
    assert not (tmp_path / "p").exists()
    assert list(tmp_path.iterdir()) == []


def test_existing_directory_needs_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "p"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(PartitionError, match="already exists") as exc:
        partition_graph(tiny(), out, PartitionConfig(num_parts=2))
    assert exc.value.path == str(out) and "overwrite" in exc.value.fix
    assert (out / "keep.txt").read_text() == "mine"


def test_overwrite_keeps_the_old_directory_until_the_new_one_is_complete(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "p"
    partition_graph(tiny(), out, PartitionConfig(num_parts=2, partitioner="contiguous"))
    before = {f: f.read_bytes() for f in out.rglob("*") if f.is_file()}
    real = writer.build_local_graph
    calls = []

    def fail_on_second_part(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full (simulated)")
        return real(*args, **kwargs)

    monkeypatch.setattr(writer, "build_local_graph", fail_on_second_part)
    with pytest.raises(OSError, match="simulated"):
        partition_graph(tiny(), out, PartitionConfig(num_parts=3, partitioner="contiguous"),
                        overwrite=True)
    assert {f: f.read_bytes() for f in out.rglob("*") if f.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["p"]  # no temporary left behind
    monkeypatch.setattr(writer, "build_local_graph", real)
    meta = partition_graph(tiny(), out, PartitionConfig(num_parts=3, partitioner="contiguous"),
                           overwrite=True)
    assert json.loads((out / "meta.json").read_text())["num_parts"] == meta.num_parts == 3
    assert not (out / "part-0" / "keep.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["p"]


SPEC = "synthetic:sbm?nodes=400&avg_degree=6&classes=4&feat_dim=4&seed=1"


def test_partition_dataset_loads_checks_and_partitions_as_partition_graph(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    meter = StageMeter()
    meta = partition_dataset(DataConfig(dataset=SPEC), tmp_path / "a",
                             PartitionConfig(num_parts=3), check=lambda d: seen.append(
                                 d.num_nodes), meter=meter)
    assert seen == [400] and [s.name for s in meter.stages][:2] == ["load", "check"]
    partition_graph(DataConfig(dataset=SPEC).load_any(), tmp_path / "b",
                    PartitionConfig(num_parts=3))
    files = sorted(str(f.relative_to(tmp_path / "a")) for f in (tmp_path / "a").rglob("*")
                   if f.is_file())
    _, mismatch, errors = filecmp.cmpfiles(tmp_path / "a", tmp_path / "b", files, shallow=False)
    assert len(files) == 1 + 3 * 18 and not mismatch and not errors and meta.num_parts == 3

    def never(self: DataConfig) -> None:
        raise AssertionError("the data was read before the settings were checked")

    monkeypatch.setattr(DataConfig, "load_any", never)
    for config, field in ((PartitionConfig(), "partition.num_parts"),
                          (PartitionConfig(num_parts=2, halo_hops=0), "partition.halo_hops")):
        with pytest.raises(ConfigError) as exc:
            partition_dataset(DataConfig(dataset=SPEC), tmp_path / "c", config)
        assert exc.value.field == field and "--" in str(exc.value.fix)


def test_partition_dataset_needs_labels_only_when_asked(tmp_path: Path) -> None:
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst\n0,1\n1,2\n2,3\n3,0\n")
    data = DataConfig(dataset=str(edges))
    assert partition_dataset(data, tmp_path / "p", PartitionConfig(num_parts=2)).num_nodes == 4
    with pytest.raises(DatasetError) as exc:
        partition_dataset(data, tmp_path / "q", PartitionConfig(num_parts=2), need_labels=True)
    assert exc.value.field == "y" and "--labels" in exc.value.fix
    assert not (tmp_path / "q").exists()
