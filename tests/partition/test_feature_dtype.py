"""``--feature-dtype``: features stored at half width, rounded as torch rounds them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gnnpar.datasets.synthetic import sbm
from gnnpar.errors import ConfigError
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import load_partition
from gnnpar.partition.verify import verify_partition
from gnnpar.partition.writer import partition_graph


@pytest.fixture(scope="module")
def dataset():  # type: ignore[no-untyped-def]
    ds = sbm(num_nodes=400, avg_degree=6, num_classes=3, feat_dim=8, seed=3)
    # Values that round differently in each format: ties, tiny and large magnitudes.
    ds.x[:4] = np.array([1 + 2**-8, 1 + 3 * 2**-8, 3e-8, -6.5e4], np.float32)[:, None]
    return ds


@pytest.mark.parametrize(("name", "torch_dtype"),
                         [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_features_stored_as_torch_rounds_them(tmp_path: Path, dataset, name: str,
                                              torch_dtype: torch.dtype) -> None:  # type: ignore[no-untyped-def]
    fp32 = partition_graph(dataset, tmp_path / "fp32", PartitionConfig(num_parts=2, seed=1))
    half = partition_graph(dataset, tmp_path / name,
                           PartitionConfig(num_parts=2, seed=1, feature_dtype=name))
    assert half.feature_dtype == name and fp32.feature_dtype == "fp32"
    verify_partition(tmp_path / name, dataset)
    for k in range(2):
        p = load_partition(tmp_path / name, k)
        want = torch.from_numpy(np.asarray(dataset.x)[p.orig_ids]).to(torch_dtype)
        got = torch.from_numpy(np.array(p.feat))
        if name == "bf16":
            got = got.view(torch.bfloat16)
        assert got.dtype == torch_dtype and torch.equal(got, want)
        full = (tmp_path / "fp32" / f"part-{k}" / "feat.npy").stat().st_size
        assert (tmp_path / name / f"part-{k}" / "feat.npy").stat().st_size < 0.51 * full + 128


def test_fp16_overflow_is_refused_before_anything_is_written(tmp_path: Path,
                                                            dataset) -> None:  # type: ignore[no-untyped-def]
    ds = dataset
    saved = ds.x[5].copy()
    ds.x[5] = 7e4
    try:
        with pytest.raises(ConfigError) as exc:
            partition_graph(ds, tmp_path / "p", PartitionConfig(num_parts=2, feature_dtype="fp16"))
        assert exc.value.field == "partition.feature_dtype" and "bf16" in exc.value.fix
        assert not (tmp_path / "p").exists()
    finally:
        ds.x[5] = saved


def test_unknown_feature_dtype(tmp_path: Path, dataset) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="feature_dtype"):
        partition_graph(dataset, tmp_path / "p", PartitionConfig(num_parts=2, feature_dtype="int8"))
