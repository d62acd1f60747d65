"""``benchmarks/gpu_check.sh --dry-run``: the GPU call's every step, rehearsed on the CPU.

GPU time comes in short windows; the call that uses one must not fail there on a renamed
flag or a moved module.  The dry run runs the same steps with gloo on tiny graphs: each
user path's commands (compared with themselves), the ``gpu`` tests' collection, the
benchmark; every record must parse and every results file be written.  Its own checks are
real on the CPU too: the run killed mid-epoch resumes from that checkpoint to the
uninterrupted run's weights bit for bit, and the exported model, rebuilt in a plain PyG
process, gives the logits the run saved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = {("main", "train"), ("main", "predict"), ("main", "export"), ("main", "plain-pyg"),
         ("full", "train"), ("grid", "train"), ("link", "train"), ("typed", "train"),
         ("bf16", "train"), ("resume", "uninterrupted"), ("resume", "killed"),
         ("resume", "resumed")}


def test_dry_run_starts_every_step_and_writes_every_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--dry-run",
                           "--out", str(out)], capture_output=True, text=True, env=env,
                          timeout=900, cwd=tmp_path)
    failed = (out / "paths.md").read_text()[-6000:] if (out / "paths.md").is_file() else ""
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:] + failed
    names = sorted(p.name for p in out.iterdir())
    bench = [n for n in names if n.startswith("gpu-")]
    assert names == sorted(["check.log", "paths.json", "paths.md", "tests.log", "summary.md",
                            *bench]) and len(names) <= 8, names
    assert sorted(n.rsplit(".", 1)[1] for n in bench) == ["json", "md"]

    paths = json.loads((out / "paths.json").read_text())
    assert paths["dry_run"] and paths["ok"]
    assert {(s["path"], s["step"]) for s in paths["steps"]} == STEPS
    for s in paths["steps"]:
        assert s["status"] == "ok", s
        if s["step"] in ("train", "uninterrupted", "resumed"):  # read from its run record
            assert s["figures"]["status"] == "complete" and s["figures"]["metric"] is not None
            assert s["forced"] == (s["path"] != "main")
    checks = {c["check"]: c for c in paths["checks"]}
    assert all(c["ok"] for c in paths["checks"]), paths["checks"]
    assert checks["final weights against the uninterrupted run (max |diff|)"]["value"] == \
        "bitwise equal"
    assert "exported model in plain PyG: the saved logits (max |diff|)" in checks
    killed_at = checks["SIGKILLed with a mid-epoch checkpoint (epoch, step)"]["value"]
    assert killed_at[1] > 0
    assert checks["resumed from that checkpoint (epoch, step)"]["value"] == killed_at

    result = json.loads((out / next(n for n in bench if n.endswith(".json"))).read_text())
    assert result["rates"]["sampled_edges_per_s"] > 0 and not result["skipped"]
    assert [r["name"] for r in result["runs"]] == ["sample", "sample-cpu", "sample-bf16",
                                                   "full"]
    assert all(r["status"] == "ok" and r["epoch_time_s"] for r in result["runs"])

    summary = (out / "summary.md").read_text()
    for step in ("environment", "gpu tests", "user paths", "benchmark"):
        assert f"| {step}" in summary and "failed" not in summary, summary
    assert " skipped" in (out / "tests.log").read_text()  # collected; no GPU to run them
