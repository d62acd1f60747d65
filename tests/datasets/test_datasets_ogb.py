"""load_ogb on tiny datasets written here in OGB's on-disk layouts, read by the real ogb."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gnnpar.datasets.ogb import load_ogb
from gnnpar.datasets.spec import load_dataset
from gnnpar.errors import DatasetError
from gnnpar.testing.conformance import lock_held
from tests.helpers.ogb_files import csv_gz

N = 7
# Hand-written graph: edges as OGB stores them, one per row.
EDGES = np.array([[0, 1], [1, 2], [2, 0], [3, 4], [4, 5], [5, 6], [6, 3], [0, 6]])
FEAT = np.arange(N * 3, dtype=np.float32).reshape(N, 3) / 4
LABELS = np.array([0, 1, 0, 2, 2, 1, 0])
SPLIT = {"train": [0, 1, 2], "valid": [3, 4], "test": [6]}


def _write_split(d: Path, split: str) -> None:
    for name, ids in SPLIT.items():
        csv_gz(d / "split" / split / f"{name}.csv.gz", ids)


def write_csv_layout(d: Path, split: str = "random") -> None:
    """ogbn-arxiv-style layout: raw/*.csv.gz and split/<split>/*.csv.gz."""
    csv_gz(d / "raw" / "edge.csv.gz", EDGES)
    csv_gz(d / "raw" / "num-node-list.csv.gz", [N])
    csv_gz(d / "raw" / "num-edge-list.csv.gz", [len(EDGES)])
    csv_gz(d / "raw" / "node-feat.csv.gz", FEAT)
    csv_gz(d / "raw" / "node-label.csv.gz", LABELS)
    _write_split(d, split)


def write_binary_layout(d: Path, labels: np.ndarray) -> None:
    """ogbn-papers100M-style layout: raw/data.npz, raw/node-label.npz (float, NaN)."""
    (d / "raw").mkdir(parents=True)
    np.savez(d / "raw" / "data.npz", edge_index=EDGES.T.astype(np.int64),
             num_nodes_list=np.array([N]), num_edges_list=np.array([len(EDGES)]),
             node_feat=FEAT.astype(np.float16))
    np.savez(d / "raw" / "node-label.npz", node_label=labels.reshape(N, 1))
    _write_split(d, "time")


def meta(dir_path: str, *, binary: bool, add_inverse_edge: bool, **extra: str) -> dict[str, str]:
    return {"dir_path": dir_path, "split": "time" if binary else "random", "num tasks": "1",
            "num classes": "3", "add_inverse_edge": str(add_inverse_edge),
            "binary": str(binary), "is hetero": "False", **extra}


def pairs(src: np.ndarray, dst: np.ndarray) -> list[tuple[int, int]]:
    return sorted(zip(np.asarray(src).tolist(), np.asarray(dst).tolist(), strict=True))


def check_loaded(ds, edges: np.ndarray, labels: np.ndarray) -> None:
    assert ds.num_nodes == N
    assert pairs(ds.src, ds.dst) == pairs(edges[:, 0], edges[:, 1])
    np.testing.assert_array_equal(ds.x, FEAT)
    assert ds.x.dtype == np.float32 and ds.y.dtype == np.int64
    np.testing.assert_array_equal(ds.y, labels)
    np.testing.assert_array_equal(ds.train_idx, SPLIT["train"])
    np.testing.assert_array_equal(ds.val_idx, SPLIT["valid"])
    np.testing.assert_array_equal(ds.test_idx, SPLIT["test"])
    assert ds.num_classes == 3


def test_csv_layout_meta_dict_loads_twice_from_mmap_cache(tmp_path: Path) -> None:
    d = tmp_path / "tiny"
    write_csv_layout(d)
    m = meta(str(d), binary=False, add_inverse_edge=True)
    both_ways = np.concatenate([EDGES, EDGES[:, ::-1]])
    first = load_ogb("tiny", meta_dict=m)
    check_loaded(first, both_ways, LABELS)
    assert (d / "gnnpar-v1" / "dataset.json").is_file()
    assert not (d / "processed").exists()
    # The second load must not need the raw files (nor ogb's torch.save cache).
    for f in (d / "raw").iterdir():
        f.unlink()
    second = load_ogb("tiny", meta_dict=m)
    check_loaded(second, both_ways, LABELS)
    assert isinstance(second.x, np.memmap) and isinstance(second.src, np.memmap)


def test_a_load_waits_for_another_process_converting_the_same_folder(tmp_path: Path) -> None:
    d = tmp_path / "tiny"
    write_csv_layout(d)
    with lock_held(d / "gnnpar-v1") as pid:  # another load converting it, then dying
        threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()
        t0 = time.monotonic()
        ds = load_ogb("tiny", meta_dict=meta(str(d), binary=False, add_inverse_edge=False))
        assert time.monotonic() - t0 >= 0.9  # it waited for the lock, not refused
    check_loaded(ds, EDGES, LABELS)
    assert (d / "gnnpar-v1" / "dataset.json").is_file()


def test_binary_layout_json_meta_dict_relative_dir_and_nan_labels(tmp_path: Path) -> None:
    labels = LABELS.astype(np.float32)
    labels[5] = np.nan  # unlabelled, as in ogbn-papers100M
    write_binary_layout(tmp_path / "bin", labels)
    meta_file = tmp_path / "meta.json"
    meta_file.write_text(json.dumps(
        {**meta("bin", binary=True, add_inverse_edge=False), "name": "tinybin"}))
    expected = LABELS.copy()
    expected[5] = -1
    for _ in range(2):
        ds = load_dataset(str(meta_file))  # spec path -> load_ogb(meta_dict=path)
        check_loaded(ds, EDGES, expected)
        assert ds.name == "tinybin"


def test_named_dataset_uses_ogb_master_csv(tmp_path: Path) -> None:
    # ogbn-arxiv's master.csv entry: csv layout, split "time", no inverse edges, 40 classes.
    write_csv_layout(tmp_path / "ogbn_arxiv", split="time")
    ds = load_ogb("ogbn-arxiv", root=tmp_path)
    assert pairs(ds.src, ds.dst) == pairs(EDGES[:, 0], EDGES[:, 1])
    assert ds.num_classes == 40 and ds.name == "ogbn-arxiv"
    again = load_dataset("ogbn-arxiv", root=tmp_path)
    np.testing.assert_array_equal(again.y, LABELS)


def zip_archive(tmp_path: Path) -> Path:
    """A zip of one csv-layout dataset folder, ``tinyzip/``, as OGB's servers give it."""
    src = tmp_path / "src"
    write_csv_layout(src / "tinyzip")
    archive = tmp_path / "tinyzip.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in (src / "tinyzip").rglob("*"):
            z.write(f, f.relative_to(src))
    return archive


def test_download_through_ogb_helpers_from_file_url(tmp_path: Path) -> None:
    archive = zip_archive(tmp_path)
    target = tmp_path / "root" / "tiny_target"
    m = meta(str(target), binary=False, add_inverse_edge=False, url=archive.as_uri(),
             download_name="tinyzip")
    ds = load_ogb("tiny", meta_dict=m)
    assert pairs(ds.src, ds.dst) == pairs(EDGES[:, 0], EDGES[:, 1])
    assert (target / "raw" / "edge.csv.gz").is_file()


def test_missing_directory_names_where_it_looked_and_how_to_get_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DatasetError) as exc:
        load_ogb("tiny", meta_dict=meta(str(missing), binary=False, add_inverse_edge=False))
    assert str(missing / "raw") in str(exc.value) and exc.value.field == "raw"
    assert "python -m gnnpar.datasets" in str(exc.value)


def test_failed_download_is_one_clear_error(tmp_path: Path) -> None:
    url = (tmp_path / "absent.zip").as_uri()
    with pytest.raises(DatasetError) as exc:
        load_ogb("tiny", meta_dict=meta(str(tmp_path / "t"), binary=False,
                                        add_inverse_edge=False, url=url))
    assert url in str(exc.value) and str(tmp_path / "t" / "raw") in str(exc.value)


@pytest.mark.parametrize(("name", "field"), [("ogbn-proteins", "num tasks"),
                                             ("ogbn-nope", "name")])
def test_unsupported_ogb_datasets(tmp_path: Path, name: str, field: str) -> None:
    with pytest.raises(DatasetError) as exc:
        load_ogb(name, root=tmp_path)
    assert exc.value.field == field and name in str(exc.value)
    assert not any(tmp_path.iterdir())


def test_meta_dict_missing_key_and_bad_split_files(tmp_path: Path) -> None:
    m = meta(str(tmp_path / "tiny"), binary=False, add_inverse_edge=False)
    del m["split"]
    with pytest.raises(DatasetError, match="split"):
        load_ogb("tiny", meta_dict=m)
    write_csv_layout(tmp_path / "tiny")
    (tmp_path / "tiny" / "split" / "random" / "test.csv.gz").unlink()
    with pytest.raises(DatasetError) as exc:
        load_ogb("tiny", meta_dict=meta(str(tmp_path / "tiny"), binary=False,
                                        add_inverse_edge=False))
    assert "test.csv.gz" in str(exc.value) and exc.value.field == "test_idx"


@pytest.mark.parametrize("dir_path", ["/etc", "../victim", "a/../../victim", "",
                                      "../specs/../victim"])
def test_meta_dict_file_cannot_point_outside_its_folder(tmp_path: Path, dir_path: str) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    archive = zip_archive(tmp_path)
    (tmp_path / "specs").mkdir()
    spec = tmp_path / "specs" / "meta.json"
    spec.write_text(json.dumps(meta(dir_path, binary=False, add_inverse_edge=False,
                                    url=archive.as_uri(), download_name="tinyzip")))
    with pytest.raises(DatasetError) as exc:
        load_dataset(str(spec))
    assert exc.value.field == "dir_path" and exc.value.path == str(spec)
    assert (victim / "keep.txt").read_text() == "precious"


def test_download_never_replaces_a_directory_it_did_not_create(tmp_path: Path) -> None:
    archive = zip_archive(tmp_path)
    target = tmp_path / "root" / "mine"
    target.mkdir(parents=True)
    (target / "notes.txt").write_text("mine")
    m = meta(str(target), binary=False, add_inverse_edge=False, url=archive.as_uri(),
             download_name="tinyzip")
    with pytest.raises(DatasetError, match="move it away") as exc:
        load_ogb("tiny", meta_dict=m)
    assert exc.value.path == str(target) and (target / "notes.txt").read_text() == "mine"
    # A damaged archive or one of another digest is refused before anything is unpacked.
    other = tmp_path / "root" / "fresh"
    with pytest.raises(DatasetError, match="SHA-256 differs"):
        load_ogb("tiny", meta_dict={**m, "dir_path": str(other), "sha256": "0" * 64})
    assert not other.exists()
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == ["mine"]
    data = bytearray(archive.read_bytes())
    data[40] ^= 0xFF  # inside the first member's compressed bytes
    archive.write_bytes(bytes(data))
    with pytest.raises(DatasetError):
        load_ogb("tiny", meta_dict={**m, "dir_path": str(other)})
    assert not other.exists()


def test_an_empty_split_file_is_one_line(tmp_path: Path) -> None:
    d = tmp_path / "tiny"
    write_csv_layout(d)
    import gzip

    with gzip.open(d / "split" / "random" / "train.csv.gz", "wb"):
        pass  # an empty file
    with pytest.raises(DatasetError, match=r"split file is empty") as exc:
        load_ogb("tiny", meta_dict=meta(str(d), binary=False, add_inverse_edge=False))
    assert exc.value.path == str(d / "split" / "random" / "train.csv.gz")
    assert exc.value.field == "train_idx"


def test_a_read_only_dataset_folder_caches_under_the_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataset on a read-only mount still loads, its converted copy under --root.

    A read-only bind mount where the machine allows one (root); elsewhere the folder is
    reported unwritable to the loader (the one call it asks).
    """
    import os
    import subprocess

    import gnnpar.datasets.ogb as ogb

    ro = tmp_path / "ro"
    d = ro / "tiny"
    write_csv_layout(d)
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(ro), str(ro)],
                             capture_output=True).returncode == 0
    if mounted:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
    else:
        real = os.access
        monkeypatch.setattr(ogb.os, "access", lambda p, m: False if Path(p) == d
                            else real(p, m))
    try:
        m = meta(str(d), binary=False, add_inverse_edge=False)
        first = load_ogb("tiny", root=tmp_path / "root", meta_dict=m)
        check_loaded(first, EDGES, LABELS)
        cached = list((tmp_path / "root" / "ogb-cache").glob("tiny-*/gnnpar-v1"))
        assert len(cached) == 1 and (cached[0] / "dataset.json").is_file()
        assert not (d / "gnnpar-v1").exists()
        check_loaded(load_ogb("tiny", root=tmp_path / "root", meta_dict=m), EDGES, LABELS)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(ro)], capture_output=True)
