"""Partition files that pass their checksums but not their meaning: the loader or verify refuses.

Each case edits a part file or ``meta.json`` and recomputes every checksum and digest, as
a tool that "fixes" a partition would: a repeated edge id (the loader and ``verify``), edge
ids that are distinct per part but not a permutation over the parts (``verify``), typed
node offsets that disagree with the per-type counts, and a typed part whose training ids
include a node of another type (which crashed mid-epoch with a batch-size mismatch).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gnnpar.artifacts.files import sha256_file, write_digested_json
from gnnpar.datasets.synthetic import sbm, typed
from gnnpar.errors import PartitionError
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import PartitionMeta, load_partition
from gnnpar.partition.verify import verify_partition
from gnnpar.partition.writer import partition_graph


def _edit_meta(out: Path, change: Callable[[dict[str, Any]], None]) -> None:
    meta = json.loads((out / "meta.json").read_text())
    del meta["digest"]
    change(meta)
    write_digested_json(out / "meta.json", meta)


def _edit_part(out: Path, rel: str, change: Callable[[np.ndarray], np.ndarray]) -> None:
    f = out / rel
    np.save(f, change(np.load(f)))
    _edit_meta(out, lambda m: m["files"].__setitem__(rel, sha256_file(f)))


@pytest.fixture(scope="module")
def homogeneous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("semantics") / "parts"
    partition_graph(sbm(num_nodes=400, avg_degree=6, num_classes=3, feat_dim=4, seed=1), out,
                    PartitionConfig(num_parts=2))
    return out


@pytest.fixture(scope="module")
def typed_parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("semantics-typed") / "parts"
    partition_graph(typed(num_papers=300, num_authors=80, num_venues=12, num_classes=3,
                          feat_dim=4, seed=1), out, PartitionConfig(num_parts=2))
    return out


def _copy(src: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(src, tmp_path / "parts"))


def test_a_repeated_edge_id_is_refused_by_the_loader_and_verify(homogeneous: Path,
                                                                 tmp_path: Path) -> None:
    out = _copy(homogeneous, tmp_path)

    def repeat(e_id: np.ndarray) -> np.ndarray:
        e_id = e_id.copy()
        e_id[1] = e_id[0]
        return e_id

    _edit_part(out, "part-0/e_id.npy", repeat)
    twice = int(np.load(out / "part-0" / "e_id.npy")[0])
    for check in (lambda: load_partition(out, 0), lambda: verify_partition(out)):
        with pytest.raises(PartitionError, match=f"holds edge id {twice} twice") as exc:
            check()
        assert exc.value.path == str(out / "part-0" / "e_id.npy")
    load_partition(out, 0, verify=False)  # the cheap checks alone do not sort the ids


def test_edge_ids_distinct_per_part_but_not_a_permutation_fail_verify(
        homogeneous: Path, tmp_path: Path) -> None:
    out = _copy(homogeneous, tmp_path)
    theirs = np.load(out / "part-1" / "e_id.npy")
    mine = np.load(out / "part-0" / "e_id.npy")
    stolen = int(np.setdiff1d(theirs, mine)[0])  # an id part 1 owns and part 0 lacks

    def steal(e_id: np.ndarray) -> np.ndarray:
        e_id = e_id.copy()
        e_id[0] = stolen
        return e_id

    _edit_part(out, "part-0/e_id.npy", steal)
    load_partition(out, 0)  # distinct within the part: the loader cannot tell
    with pytest.raises(PartitionError, match="permutation of the stored edges"):
        verify_partition(out)


def test_typed_node_offsets_must_match_the_type_counts(typed_parts: Path,
                                                       tmp_path: Path) -> None:
    out = _copy(typed_parts, tmp_path)

    def shift(meta: dict[str, Any]) -> None:
        offsets = meta["hetero"]["node_offsets"]
        offsets[1] += 5  # paper gets 5 more ids, author 5 fewer: the total is unchanged

    _edit_meta(out, shift)
    with pytest.raises(PartitionError, match="but the parts own") as exc:
        PartitionMeta.load(out)
    assert exc.value.field == "hetero.node_offsets" and exc.value.path == str(out / "meta.json")


def test_typed_training_ids_of_another_type_are_refused(typed_parts: Path,
                                                        tmp_path: Path) -> None:
    out = _copy(typed_parts, tmp_path)
    meta = PartitionMeta.load(out)
    assert meta.types is not None
    bounds = meta.types.part_bounds(0)
    target = meta.types.layout.type_index(meta.types.layout.target)
    other = int(bounds[target + 1])  # the first local id after the target type's range
    assert other < meta.parts[0]["num_owned"]
    _edit_part(out, "part-0/train_idx.npy", lambda idx: np.append(idx, other))
    with pytest.raises(PartitionError, match="another type than the target") as exc:
        load_partition(out, 0)
    assert exc.value.path == str(out / "part-0" / "train_idx.npy")
