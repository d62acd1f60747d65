"""ParallelDims builds the groups its degrees name, hands them out by name, refuses others."""

from __future__ import annotations

from typing import Any

import pytest

from gnnpar.errors import ConfigError
from gnnpar.testing import run_multiproc


def _groups() -> dict[str, Any]:
    import torch.distributed as dist

    from gnnpar.distributed import init, shutdown
    from gnnpar.parallel.config import ParallelConfig
    from gnnpar.parallel_dims import ParallelDims

    ctx = init()
    out: dict[str, Any] = {}
    try:
        dims = ParallelDims(ctx, local=2, grid=(2, 1, 1), dnn=(1, 2, 1))
        out["data"] = dims.get_group("data") is ctx.group
        out["sizes"] = {name: dist.get_world_size(dims.get_group(name))
                        for name in ("local", "x", "y", "z", "pp", "dp", "tp")}
        out["grid_mesh"] = tuple(dims.get_mesh("grid").shape)
        out["dnn_mesh"] = tuple(dims.get_mesh("dnn").mesh_dim_names or ())
        mesh = ParallelConfig(dp=2).build_mesh()
        out["build_mesh"] = (tuple(mesh.mesh_dim_names or ()), tuple(mesh.shape))
        plain = ParallelDims(ctx)
        for name in ("local", "x", "dp"):
            try:
                plain.get_group(name)
            except KeyError:
                out.setdefault("refused", []).append(name)
        try:
            ParallelDims(ctx, local=3)
        except ConfigError as exc:
            out["tile"] = exc.field
    finally:
        shutdown()
    return out


def test_groups_by_name_on_two_ranks() -> None:
    runs = run_multiproc(_groups, 2)
    for run in runs:
        assert run["data"]
        assert run["sizes"] == {"local": 2, "x": 2, "y": 1, "z": 1, "pp": 1, "dp": 2, "tp": 1}
        assert run["grid_mesh"] == (2, 1, 1)
        assert run["dnn_mesh"] == ("pp", "dp", "tp")
        assert run["build_mesh"] == (("pp", "dp", "tp"), (1, 2, 1))
        assert run["refused"] == ["local", "x", "dp"]
        assert run["tile"] == "train.sync_groups"


def test_a_grid_that_does_not_fit_is_refused_before_any_group() -> None:
    import torch

    from gnnpar.distributed import DistContext
    from gnnpar.parallel_dims import ParallelDims

    ctx = DistContext(rank=0, world_size=2, local_rank=0, device=torch.device("cpu"),
                      backend="gloo")
    with pytest.raises(ConfigError, match="grid 2,2,1 has 4 ranks"):
        ParallelDims(ctx, grid=(2, 2, 1))
