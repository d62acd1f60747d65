"""Work lost per failure against ``--checkpoint-every-s``: a rank killed, the run restarted.

Each round runs ``gnnpar-train --nproc 2 --max-restarts 1`` on a synthetic graph with
epochs of several seconds, kills rank 1 (SIGKILL) at a random moment of training, and
reads the restart from the run record: ``lost_s`` (training done since the checkpoint
resumed from: what the failure cost), ``steps_redone`` and ``restart_s`` (stopping the
ranks, starting new ones, loading the parts and the checkpoint).  ``--checkpoint-every-s
0`` (epoch ends only) is the baseline beside each cadence, in the same rounds.  The load
average and the runs' CPU seconds are logged beside the wall times.

Usage::

    python benchmarks/bench_restarts.py [--seconds 0,2,5] [--rounds 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gnnpar.testing.procs import rank_pid, wait_for_epochs
from gnnpar.train.cli import parse
from gnnpar.train.prepare import resolve_partition

GRAPH = "synthetic:sbm?nodes=20000&feat_dim=32&classes=8&seed=1&homophily=0.8"
FLAGS = ["--mode", "sample", "--fanouts", "10,5", "--batch-size", "32", "--hidden", "32",
         "--epochs", "6", "--threads", "1", "--no-progress", "--eval", "none",
         "--eval-every", "100"]


def one_round(parts: Path, seconds: float, work: Path, rng: random.Random) -> dict[str, Any]:
    """One run killed at a random moment: the restart entry and the run's costs."""
    out = work / f"run-{seconds}-{rng.random():.6f}"
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "gnnpar.train", str(parts), *FLAGS,
                             "--nproc", "2", "--max-restarts", "1", "--checkpoint-every-s",
                             str(seconds), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    wait_for_epochs(out / "record.json", 1, proc, 600)
    time.sleep(rng.uniform(0.0, 8.0))
    victim = rank_pid(proc.pid, 1)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=1200)
    wall = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, err[-2000:]
    record = json.loads((out / "record.json").read_text())
    [entry] = record["restarts"]
    epoch_s = statistics.median(e["epoch_time_s"] for e in record["epochs"])
    return {"seconds": seconds, "lost_s": entry["lost_s"], "steps_redone": entry["steps_redone"],
            "restart_s": entry["restart_s"], "epoch_s": epoch_s,
            "steps_per_epoch": record["summary"]["steps_per_epoch"], "wall_s": wall,
            "cpu_s": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
            "load": os.getloadavg()[0]}


def main() -> None:
    """Run the rounds and print the table (and write the JSON)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("--seconds", default="0,2,5")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).parent / "results" /
                    f"restarts-{time.strftime('%Y-%m-%d')}.json")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    cadences = [float(s) for s in args.seconds.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-restarts-") as tmp:
        work = Path(tmp)
        parts = resolve_partition(parse([GRAPH, "--root", str(work / "data")]), 2)
        for r in range(args.rounds):
            for s in cadences:  # every cadence in each round, beside the baseline
                row = {"round": r, **one_round(parts, s, work, rng)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"\n{'--checkpoint-every-s':>21} {'lost s (median)':>16} {'max':>6} "
          f"{'steps redone':>13} {'restart s':>10} {'epoch s':>8}")
    summary = []
    for s in cadences:
        mine = [row for row in rows if row["seconds"] == s]
        lost = [row["lost_s"] for row in mine]
        line = {"seconds": s, "lost_s_median": statistics.median(lost), "lost_s_max": max(lost),
                "steps_redone_median": statistics.median(row["steps_redone"] for row in mine),
                "restart_s_median": statistics.median(row["restart_s"] for row in mine),
                "epoch_s_median": statistics.median(row["epoch_s"] for row in mine)}
        summary.append(line)
        print(f"{'epoch ends only' if s == 0 else s:>21} {line['lost_s_median']:>16.1f} "
              f"{line['lost_s_max']:>6.1f} {line['steps_redone_median']:>13.0f} "
              f"{line['restart_s_median']:>10.1f} {line['epoch_s_median']:>8.1f}")
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "graph": GRAPH,
                                    "flags": FLAGS, "rows": rows, "summary": summary},
                                   indent=1))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
