"""Reading and verifying partition directories: damaged, foreign and tampered ones."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gnnpar.artifacts.files import json_digest, sha256_file, write_digested_json
from gnnpar.datasets.synthetic import sbm
from gnnpar.errors import PartitionError
from gnnpar.partition.cli import main
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import EDGE_DTYPES, FORMAT_VERSION, load_partition
from gnnpar.partition.verify import verify_partition
from gnnpar.partition.writer import partition_graph


@pytest.fixture(scope="module")
def dataset():  # type: ignore[no-untyped-def]
    return sbm(num_nodes=300, avg_degree=6, num_classes=3, feat_dim=4, seed=2)


@pytest.fixture
def out(tmp_path: Path, dataset) -> Path:  # type: ignore[no-untyped-def]
    partition_graph(dataset, tmp_path / "p", PartitionConfig(num_parts=3, seed=1))
    return tmp_path / "p"


def edit_meta(out: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Change ``meta.json`` and its digest, as a consistent but wrong writer would."""
    meta = json.loads((out / "meta.json").read_text())
    change(meta)
    write_digested_json(out / "meta.json", meta)


def rewrite(out: Path, rel: str, array: np.ndarray) -> None:
    """Replace one array and its checksum, as a consistent but wrong writer would."""
    np.save(out / rel, array)
    edit_meta(out, lambda m: m["files"].__setitem__(rel, sha256_file(out / rel)))


def test_a_valid_partition_verifies(out: Path, dataset) -> None:  # type: ignore[no-untyped-def]
    report = verify_partition(out, dataset)
    assert report.num_parts == 3 and report.files == 54
    assert "edges" in report.checks and "features" in report.checks
    assert "OK" in str(report)


def _as_older_version(out: Path, version: int) -> None:
    """Rewrite ``out`` as a version-1 or -2 directory: no edge-id, edge or link files."""
    meta = json.loads((out / "meta.json").read_text())
    meta["feat_dtype"] = meta.pop("feature_dtype")  # its name before version 5
    for key in ("digest", "edge_dim", "neg_kind", *(["feat_dtype"] if version < 2 else [])):
        del meta[key]
    for rel in [r for r in meta["files"] if Path(r).stem in EDGE_DTYPES]:
        del meta["files"][rel]
        (out / rel).unlink()
    meta["parts"] = [{k: v for k, v in p.items() if k in ("num_owned", "num_halo",
                                                          "num_edges")} for p in meta["parts"]]
    meta["format_version"] = version
    if version >= 2:
        meta["digest"] = json_digest(meta)
    (out / "meta.json").write_text(json.dumps(meta))


def test_version_1_reads_as_fp32_features(out: Path, dataset) -> None:  # type: ignore[no-untyped-def]
    _as_older_version(out, 1)
    assert load_partition(out, 0).meta.feature_dtype == "fp32"
    verify_partition(out, dataset)


def test_version_2_reads_without_edge_ids(out: Path, dataset) -> None:  # type: ignore[no-untyped-def]
    _as_older_version(out, 2)
    part = load_partition(out, 1)
    assert part.e_id is None and len(part.train_edges) == 0
    verify_partition(out, dataset)
    with pytest.raises(PartitionError) as exc:  # what needs edge ids says how to get them
        part.edge_ids()
    assert exc.value.field == "format_version" and "re-partition" in exc.value.fix


def _as_version_4(out: Path) -> None:
    """Rewrite ``meta.json`` as version 4 wrote it: the feature dtype named ``feat_dtype``."""
    def old(meta: dict[str, Any]) -> None:
        meta["format_version"] = 4
        meta["feat_dtype"] = meta.pop("feature_dtype")
    edit_meta(out, old)


def test_version_4_reads_its_feat_dtype(tmp_path: Path, dataset, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "bf16"
    partition_graph(dataset, out, PartitionConfig(num_parts=3, seed=1, feature_dtype="bf16"))
    written = json.loads((out / "meta.json").read_text())
    assert written["format_version"] == FORMAT_VERSION == 5 and "feat_dtype" not in written
    _as_version_4(out)
    part = load_partition(out, 1)
    assert (part.meta.format_version, part.meta.feature_dtype) == (4, "bf16")
    assert part.feat.dtype == np.uint16 and part.e_id is not None
    verify_partition(out, dataset)
    assert main(["info", str(out)]) == 0
    assert f"{out}: format v4, " in capsys.readouterr().out


@pytest.mark.parametrize(("version", "key", "value", "error"), [
    (4, "feat_dtype", "int8", "feat_dtype is 'int8', not one of fp32, fp16, bf16"),
    (5, "feat_dtype", "bf16", "field is missing"),  # version 5 names it feature_dtype
])
def test_a_feature_dtype_under_the_wrong_name_or_value_is_refused(
        out: Path, version: int, key: str, value: str, error: str, capsys) -> None:  # type: ignore[no-untyped-def]
    def change(meta: dict[str, Any]) -> None:
        del meta["feature_dtype"]
        meta.update({"format_version": version, key: value})
    edit_meta(out, change)
    field = "feat_dtype" if version < 5 else "feature_dtype"
    for call in (lambda: load_partition(out, 0), lambda: verify_partition(out)):
        with pytest.raises(PartitionError, match=error) as exc:
            call()
        assert exc.value.path == str(out / "meta.json") and exc.value.field == field
        assert "gnnpar-partition" in exc.value.fix
    assert main(["info", str(out)]) == 1  # one line: the file, the field, the command
    said = capsys.readouterr().err
    assert str(out / "meta.json") in said and field in said and "gnnpar-partition" in said


def test_other_format_version(out: Path) -> None:
    meta = json.loads((out / "meta.json").read_text())
    meta["format_version"] = FORMAT_VERSION + 1
    (out / "meta.json").write_text(json.dumps(meta))
    for call in (lambda: load_partition(out, 0), lambda: verify_partition(out)):
        with pytest.raises(PartitionError) as exc:
            call()
        assert exc.value.field == "format_version"
        assert exc.value.path == str(out / "meta.json") and "re-partition" in exc.value.fix


def test_checksum_mismatch_names_the_file(out: Path) -> None:
    f = out / "part-1" / "indices.npy"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.write_bytes(bytes(data))
    load_partition(out, 0)  # only the loaded part's files are checked
    for call in (lambda: load_partition(out, 1), lambda: verify_partition(out)):
        with pytest.raises(PartitionError, match="sha256 differs") as exc:
            call()
        assert exc.value.path == str(f) and "re-create" in exc.value.fix


def test_truncated_npy_names_the_file(out: Path) -> None:
    f = out / "part-0" / "feat.npy"
    f.write_bytes(f.read_bytes()[:-10])
    with pytest.raises(PartitionError, match="sha256 differs") as exc:
        load_partition(out, 0)
    assert exc.value.path == str(f)
    for mmap in (True, False):
        with pytest.raises(PartitionError, match="truncated") as exc:
            load_partition(out, 0, mmap=mmap, verify=False)
        assert exc.value.path == str(f)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(PartitionError, match="does not exist") as exc:
        verify_partition(tmp_path / "nope")
    assert "gnnpar-partition" in exc.value.fix


def test_dropped_edge_is_found(out: Path) -> None:
    p = load_partition(out, 0, mmap=False)
    rewrite(out, "part-0/indices.npy", np.asarray(p.indices)[:-1])
    rewrite(out, "part-0/e_id.npy", np.asarray(p.e_id)[:-1])
    rewrite(out, "part-0/edge_attr.npy", np.asarray(p.edge_attr)[:-1])
    indptr = np.array(p.indptr)
    indptr[p.num_owned:] -= 1
    rewrite(out, "part-0/indptr.npy", indptr)
    with pytest.raises(PartitionError, match="part 0 lists") as exc:
        verify_partition(out)
    edit_meta(out, lambda m: m["parts"][0].__setitem__("num_edges",
                                                       m["parts"][0]["num_edges"] - 1))
    with pytest.raises(PartitionError, match="stored in-edges") as exc:
        verify_partition(out)
    assert exc.value.path == str(out / "part-0" / "in_degree.npy")


def test_wrong_halo_is_found(out: Path) -> None:
    p = load_partition(out, 2, mmap=False)
    halo = np.array(p.halo_gids)
    owned_elsewhere = np.setdiff1d(np.arange(p.first_gid), halo)
    halo[0] = owned_elsewhere[0]  # a node not adjacent to this part, same count
    rewrite(out, "part-2/halo_gids.npy", np.sort(halo))
    with pytest.raises(PartitionError) as exc:
        verify_partition(out)
    # The swapped node's in-degree gives it away (the stored edges now point at it).
    assert exc.value.path == str(out / "part-2" / "in_degree.npy")


def test_changed_feature_is_found_only_with_the_dataset(out: Path, dataset) -> None:  # type: ignore[no-untyped-def]
    p = load_partition(out, 1, mmap=False)
    feat = np.array(p.feat)
    feat[5, 2] += 1.0
    rewrite(out, "part-1/feat.npy", feat)
    verify_partition(out)
    with pytest.raises(PartitionError) as exc:
        verify_partition(out, dataset)
    assert exc.value.path == str(out / "part-1" / "feat.npy") and exc.value.field == "feat"


def test_partition_of_another_graph(out: Path) -> None:
    other = sbm(num_nodes=301, avg_degree=6, num_classes=3, feat_dim=4, seed=2)
    with pytest.raises(PartitionError, match="another graph"):
        verify_partition(out, other)


def test_extra_halo_node_is_found(out: Path) -> None:
    p = load_partition(out, 0, mmap=False)
    halo = np.asarray(p.halo_gids)
    extra = int(np.setdiff1d(np.arange(p.num_owned, p.meta.num_nodes), halo)[0])
    at = int(np.searchsorted(halo, extra))
    indices = np.array(p.indices)
    indices[indices >= p.num_owned + at] += 1  # later halo slots move up by one
    rewrite(out, "part-0/halo_gids.npy", np.insert(halo, at, extra))
    rewrite(out, "part-0/indices.npy", indices)
    rewrite(out, "part-0/indptr.npy", np.append(p.indptr, p.indptr[-1]))
    owner = load_partition(out, int(p.meta.owner(np.array([extra]))[0]))
    degree = owner.in_degree[extra - owner.first_gid]
    rewrite(out, "part-0/in_degree.npy", np.insert(p.in_degree, p.num_owned + at, degree))
    rewrite(out, "part-0/adj_complete.npy", np.append(p.adj_complete, False))
    edit_meta(out, lambda m: m["parts"][0].__setitem__("num_halo",
                                                       m["parts"][0]["num_halo"] + 1))
    with pytest.raises(PartitionError, match="within 1 hop") as exc:
        verify_partition(out)
    assert exc.value.path == str(out / "part-0" / "halo_gids.npy")


def _refused(out: Path, path: Path, field: str, match: str | None = None) -> None:
    """Loading a part and verifying both refuse, naming ``path`` and ``field``."""
    for call in (lambda: load_partition(out, 0), lambda: verify_partition(out)):
        with pytest.raises(PartitionError, match=match) as exc:
            call()
        assert exc.value.path == str(path) and exc.value.field == field, exc.value
        assert exc.value.fix


def test_meta_json_edited_by_hand_is_refused(out: Path) -> None:
    meta = json.loads((out / "meta.json").read_text())
    meta["num_classes"] = 2
    (out / "meta.json").write_text(json.dumps(meta))
    _refused(out, out / "meta.json", "digest", "changed after it was written")
    del meta["digest"]  # removing the digest does not help
    (out / "meta.json").write_text(json.dumps(meta))
    _refused(out, out / "meta.json", "digest", "no digest")


@pytest.mark.parametrize("change", ["drop", "traverse", "not_hex"])
def test_checksums_cannot_be_removed_or_point_outside(out: Path, change: str) -> None:
    def edit(m: dict[str, Any]) -> None:
        if change == "drop":
            del m["files"]["part-0/feat.npy"]
        elif change == "traverse":
            m["files"]["part-0/../../etc/hostname"] = "0" * 64
        else:
            m["files"]["part-0/feat.npy"] = "x"

    edit_meta(out, edit)
    _refused(out, out / "meta.json", "files")


@pytest.mark.parametrize(("key", "value"), [("num_parts", "3"), ("offsets", [0, 1.5, 300, 300]),
                                            ("parts", {}), ("files", []), ("num_nodes", True),
                                            ("halo_hops", 0)])
def test_wrong_json_types_name_the_field(out: Path, key: str, value: Any) -> None:
    edit_meta(out, lambda m: m.__setitem__(key, value))
    _refused(out, out / "meta.json", "num_parts" if key == "halo_hops" else key)


def test_damaged_arrays_with_matching_checksums_are_refused_at_load(out: Path) -> None:
    p = load_partition(out, 0, mmap=False)
    feat = np.array(p.feat)
    feat[3, 1] = np.nan
    rewrite(out, "part-0/feat.npy", feat)
    _refused(out, out / "part-0" / "feat.npy", "feat", "NaN")
    rewrite(out, "part-0/feat.npy", np.asarray(p.feat))
    rewrite(out, "part-0/indices.npy", np.asarray(p.indices).astype(np.int32))
    _refused(out, out / "part-0" / "indices.npy", "indices", "dtype int32")
    bad = np.array(p.indices)
    bad[0] = p.num_owned + p.num_halo  # one past the last local id
    rewrite(out, "part-0/indices.npy", bad)
    _refused(out, out / "part-0" / "indices.npy", "indices", "outside")
    rewrite(out, "part-0/indices.npy", np.asarray(p.indices))
    label = np.array(p.label)
    label[0] = 99
    rewrite(out, "part-0/label.npy", label)
    _refused(out, out / "part-0" / "label.npy", "label", "outside")
