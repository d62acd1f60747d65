"""``--precision bf16`` and ``--feature-dtype bf16``: the same accuracy, half the bytes.

Each mode trains twice on 2 ranks with the same seed, once in fp32 and once with bf16
features on disk and bf16 autocast.  The samples do not depend on the precision, so the
feature rows sent are the same and their bytes exactly half; full mode's halo rows are
the layers' bf16 activations, also exactly half.  Accuracy on the 2,000 test nodes must
be within 0.5 point of fp32's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from gnnpar.models import node as models
from gnnpar.models.node import sampled_precision

GRAPH = "synthetic:sbm?nodes=10000&feat_dim=32&classes=8&seed=5&homophily=0.6"
COMMON = ["--nproc", "2", "--no-progress", "--timeout-s", "120", "--hidden", "64"]
MODES = {"sample": ["--epochs", "4", "--fanouts", "10,5", "--batch-size", "512",
                    "--no-peer-reads"],  # the features travel (and are counted)
         "full": ["--epochs", "60", "--lr", "0.02"]}
BF16 = ["--precision", "bf16", "--feature-dtype", "bf16"]


def _train(work: Path, name: str, *args: str) -> dict[str, Any]:
    exe = shutil.which("gnnpar-train")
    cmd = [exe] if exe else [sys.executable, "-m", "gnnpar.train"]
    out = work / name
    proc = subprocess.run([*cmd, GRAPH, *COMMON, "--root", str(work / "data"), "--out",
                           str(out), *args], capture_output=True, text=True, timeout=600,
                          cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record: dict[str, Any] = json.loads((out / "record.json").read_text())
    return record


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    work = tmp_path_factory.mktemp("precision")
    return {f"{mode}-{p}": _train(work, f"{mode}-{p}", "--mode", mode, *flags,
                                  *(BF16 if p == "bf16" else []))
            for mode, flags in MODES.items() for p in ("fp32", "bf16")}


@pytest.mark.parametrize("mode", list(MODES))
def test_bf16_accuracy_within_half_a_point(records: dict[str, dict[str, Any]],
                                           mode: str) -> None:
    fp32, bf16 = records[f"{mode}-fp32"]["summary"], records[f"{mode}-bf16"]["summary"]
    assert fp32["test_acc"] > 0.5  # it learnt something
    keys = ["test_acc", "val_acc"] + (["test_acc_sampled"] if mode == "sample" else [])
    for key in keys:
        assert abs(bf16[key] - fp32[key]) <= 0.005, (key, fp32[key], bf16[key])


@pytest.mark.parametrize(("mode", "kind"), [("sample", "feature"), ("full", "halo"),
                                            ("full", "halo_grad")])
def test_bf16_halves_the_bytes(records: dict[str, dict[str, Any]], mode: str,
                               kind: str) -> None:
    def total(precision: str, field: str) -> int:  # over epochs: the mean is rounded
        return sum(e["comm"][kind][field] for e in records[f"{mode}-{precision}"]["epochs"])

    assert total("bf16", "rows") == total("fp32", "rows") > 0
    assert total("bf16", "bytes") * 2 == total("fp32", "bytes")
    assert records[f"{mode}-bf16"]["partition"]["feature_dtype"] == "bf16"


def test_bf16_computes_in_fp32_on_a_cpu_without_native_bf16(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    assert sampled_precision("fp32", cpu) == "fp32"
    monkeypatch.setattr(models, "_cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert sampled_precision("bf16", cpu) == "fp32"  # AVX2 emulates bf16: compute fp32
    monkeypatch.setattr(models, "_cpu_flags", lambda: frozenset({"avx2", "amx_bf16"}))
    assert sampled_precision("bf16", cpu) == ("bf16" if torch.backends.mkldnn.is_available()
                                              else "fp32")
