"""GraphDataset: exact memory-mapped save/load round trips, atomic saves, validation errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gnnpar.datasets.graph import GraphDataset
from gnnpar.errors import DatasetError

ARRAYS = ("src", "dst", "x", "y", "train_idx", "val_idx", "test_idx")


def tiny(**over: object) -> GraphDataset:
    """6 nodes, hand-built: a directed 6-cycle plus a self-loop and a duplicate edge."""
    base = dict(
        num_nodes=6,
        src=np.array([0, 1, 2, 3, 4, 5, 2, 0], dtype=np.int64),
        dst=np.array([1, 2, 3, 4, 5, 0, 2, 1], dtype=np.int64),
        x=np.linspace(-1, 1, 18, dtype=np.float32).reshape(6, 3),
        y=np.array([0, 2, 1, -1, 2, 0], dtype=np.int64),
        train_idx=np.array([0, 1], dtype=np.int64),
        val_idx=np.array([2], dtype=np.int64),
        test_idx=np.array([4, 5], dtype=np.int64),
        name="tiny",
    )
    base.update(over)
    return GraphDataset(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("ds", [
    tiny(),
    tiny(x=None),
    GraphDataset(num_nodes=6, src=tiny().src, dst=tiny().dst, name="tiny"),
], ids=["full", "no-features", "edges-only"])
def test_save_load_round_trip_is_exact_and_memory_mapped(tmp_path: Path,
                                                         ds: GraphDataset) -> None:
    ds.save(tmp_path / "d")
    back = GraphDataset.load(tmp_path / "d")
    assert (back.num_nodes, back.name, back.num_classes) == (6, "tiny", ds.num_classes)
    for fld in ARRAYS:
        a, b = getattr(ds, fld), getattr(back, fld)
        if a is None:
            assert b is None
            continue
        assert isinstance(b, np.memmap) and b.dtype == a.dtype
        np.testing.assert_array_equal(a, b)
    assert back.summary() == ds.summary()


def test_save_is_atomic_and_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "d"
    tiny().save(out)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(DatasetError, match="overwrite"):
        tiny(name="other").save(out)
    bad = tiny(x=np.full((6, 3), np.nan, dtype=np.float32))
    with pytest.raises(DatasetError):
        bad.save(out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == before
    assert GraphDataset.load(out).name == "tiny"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]  # no temporary siblings
    tiny(name="other").save(out, overwrite=True)
    assert GraphDataset.load(out).name == "other"


@pytest.mark.parametrize(("over", "field"), [
    ({"x": np.zeros((5, 3), np.float32)}, "x"),
    ({"y": np.zeros(7, np.int64)}, "y"),
    ({"x": np.where(np.eye(6, 3) > 0, np.inf, 0).astype(np.float32)}, "x"),
    ({"dst": np.array([1, 2, 3, 4, 5, 0, 2, 6])}, "dst"),
    ({"src": np.array([-1, 1, 2, 3, 4, 5, 2, 0])}, "src"),
    ({"val_idx": np.array([1])}, "val_idx"),
    ({"test_idx": np.array([3])}, "test_idx"),
])
def test_validate_names_field(over: dict[str, np.ndarray], field: str) -> None:
    with pytest.raises(DatasetError) as exc:
        tiny(**over).validate("somewhere")
    assert exc.value.field == field and "somewhere" in str(exc.value) and exc.value.fix


def test_to_undirected_matches_brute_force() -> None:
    ds = tiny()
    und = ds.to_undirected(remove_self_loops=True)
    pairs = set(zip(ds.src.tolist(), ds.dst.tolist(), strict=True))
    want = {(s, d) for s, d in pairs | {(d, s) for s, d in pairs} if s != d}
    got = list(zip(und.src.tolist(), und.dst.tolist(), strict=True))
    assert len(got) == len(want) and set(got) == want
    assert replace(und, x=None).num_edges == 12


def test_load_rejects_other_format_and_truncated_arrays(tmp_path: Path) -> None:
    out = tiny().save(tmp_path / "d")
    np.save(out / "src.npy", np.zeros(3, np.int64))
    with pytest.raises(DatasetError, match="marker lists") as exc:  # its size and digest
        GraphDataset.load(out)
    assert exc.value.field == "files" and exc.value.path == str(out / "src.npy")
    with pytest.raises(DatasetError) as exc:  # unverified, the sizes still disagree
        GraphDataset.load(out, validate=False)
    assert exc.value.field == "num_edges"
    (out / "dataset.json").write_text('{"format": "gnnpar-dataset", "format_version": 99}')
    with pytest.raises(DatasetError) as exc:
        GraphDataset.load(out)
    assert exc.value.field == "format_version" and "dataset.json" in str(exc.value)
