"""Local SGD / model averaging (``--sync every:H``) on real gloo ranks.

References: the synchronous run (``every:1`` must be it, bit for bit), the ranks' own
parameters compared with each other step by step, and the bytes an all-reduce of the
model's parameters (and Adam's two moments) must send: on a ring of two ranks each rank
sends ``P * 4`` bytes, ``2 P * 4`` in all (the record sums the ranks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gnnpar.errors import ConfigError
from gnnpar.testing import run_multiproc
from gnnpar.train.config import Config
from tests.helpers.workers import _crc, configure, small_config


@pytest.fixture(scope="module")
def runs(two_ranks: list[dict[str, Any]]) -> list[Any]:
    """``_workers.local_sgd_runs`` on each rank (of the shared 2-rank run)."""
    return [rank["local_sgd"] for rank in two_ranks]


def test_every_1_is_synchronous_training(runs: list[Any]) -> None:
    for rank in runs:
        for key, value in rank["default"]["params"].items():
            assert np.array_equal(rank["every1"]["params"][key], value), key
    assert runs[0]["every1"]["params"].keys() == runs[1]["every1"]["params"].keys()


def test_every_4_averages_every_4_steps(runs: list[Any]) -> None:
    a, b = (r["every4"]["crcs"] for r in runs)
    steps = runs[0]["every4"]["steps"]
    assert steps >= 8 and len(a) == len(b) == 2 * steps
    for (epoch, step, ca), (_, _, cb) in zip(a, b, strict=True):
        g = epoch * steps + step
        averaged = (g + 1) % 4 == 0
        assert (ca == cb) == averaged, (epoch, step)  # equal exactly after an average
    # The epoch ends average too: both ranks finish with one model.
    for key, value in runs[0]["every4"]["params"].items():
        assert np.array_equal(runs[1]["every4"]["params"][key], value), key


def _bytes(record: dict[str, Any], kind: str) -> list[int]:
    return [e["comm"].get(kind, {}).get("bytes", 0) for e in record["epochs"]]


def test_bytes_of_local_sgd(runs: list[Any]) -> None:
    r = runs[0]
    p4, steps = 2 * 4 * r["every4"]["num_params"], r["every4"]["steps"]  # both ranks
    sync_grad = _bytes(r["every1"]["record"], "grad")
    assert sync_grad == [steps * p4] * 2  # one all-reduce of every gradient per step
    assert _bytes(r["every4"]["record"], "grad") == [0, 0]
    averages = [sum((e * steps + s + 1) % 4 == 0 for s in range(steps)) for e in range(2)]
    # Each average sends the parameters; each epoch end the parameters and Adam's moments.
    assert _bytes(r["every4"]["record"], "average") == [n * p4 + 3 * p4 for n in averages]
    # Post-local SGD: the first 3 steps are synchronous.
    assert _bytes(r["warm"]["record"], "grad") == [3 * p4, 0]
    a, b = (x["warm"]["crcs"] for x in runs)
    same = [ca == cb for (_, _, ca), (_, _, cb) in zip(a, b, strict=True)]
    assert same[:4] == [True, True, True, False]  # local from step 3, averaged after 6
    assert same[6] and not same[7]


def test_resume_mid_period_continues_exactly(two_ranks: list[dict[str, Any]]) -> None:
    """``_workers.local_sgd_resume``: stopped mid-period (every:3), then resumed."""
    for rank in (r["local_sgd_resume"] for r in two_ranks):
        for key, value in rank["full"].items():
            assert np.array_equal(rank["resumed"][key], value), key


@pytest.mark.parametrize("settings,field", [
    ({"sync": "every:0"}, "train.sync"), ({"sync": "sometimes"}, "train.sync"),
    ({"sync": "every:4", "mode": "full"}, "train.sync"),
    ({"sync": "every:4", "sync_groups": "2:4"}, "train.sync_groups"),
    ({"sync": "every:4", "sync_groups": "two"}, "train.sync_groups")])
def test_bad_sync_settings(settings: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as exc:
        configure(Config(), **settings).validate()
    assert exc.value.field == field and exc.value.fix


def _hierarchical(part_dir: str, out: str) -> tuple[list[tuple[int, int, int]], int]:
    from torch.distributed.distributed_c10d import _world

    from gnnpar.distributed import init
    from gnnpar.train.trainer import Trainer

    ctx = init()
    cfg = small_config(out, epochs=1, batch_size=16, sync="every:4", sync_groups="2:2")
    groups = len(_world.pg_map)
    trainer = Trainer(cfg, part_dir, ctx)
    crcs: list[tuple[int, int, int]] = []
    trainer.fit(lambda e, s, b: crcs.append((e, s, _crc(trainer))))
    # after the epoch end's average; the process groups this rank joined during the run
    return crcs + [(-1, -1, _crc(trainer))], len(_world.pg_map) - groups


def test_hierarchical_groups_of_two(small_parts: dict[int, str], tmp_path: Path) -> None:
    runs = run_multiproc(_hierarchical, 4, small_parts[4], str(tmp_path))
    # One group per rank for the group averages (its own pair), built once for the run.
    assert [made for _, made in runs] == [1] * 4
    ranks = [crcs for crcs, _ in runs]
    steps = len(ranks[0]) - 1
    assert steps >= 8
    for i in range(steps):
        crc = [r[i][2] for r in ranks]
        g = i + 1
        if g % 4 == 0:  # the global average
            assert len(set(crc)) == 1, i
        elif g % 2 == 0:  # within groups {0, 1} and {2, 3} only
            assert crc[0] == crc[1] and crc[2] == crc[3] and crc[0] != crc[2], i
        else:  # a local step: every rank on its own
            assert len(set(crc)) == 4, i
    assert len({r[-1][2] for r in ranks}) == 1
