"""Local SGD (``--sync every:H``): gradient bytes per epoch and accuracy, H = 1, 4, 16.

Trains the embedded default graph (``synthetic:sbm``, 32,768 nodes) with
``gnnpar-train --nproc 2`` for a fixed number of epochs at each ``H`` (batch 256 per
rank, so an epoch has 32 steps), and reads each run's record: bytes per epoch of the
gradient all-reduce (``grad``) and of the parameter averages (``average``, which
includes the averaging of parameters and Adam's moments at every epoch end), their ratio
to ``H = 1``, the full-neighbour test accuracy after the last epoch and the epoch time.

    python benchmarks/bench_local_sgd.py [--epochs 10] [--periods 1,4,16] [--json OUT]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gnnpar.config import ArgumentParser


def run(period: int, epochs: int, root: Path, extra: list[str]) -> dict[str, Any]:
    out = root / f"every{period}"
    cmd = [sys.executable, "-m", "gnnpar.train", "--nproc", "2", "--epochs", str(epochs),
           "--batch-size", "256", "--sync", f"every:{period}", "--root", str(root / "data"),
           "--out", str(out), "--no-progress", *extra]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    record = json.loads((out / "record.json").read_text())
    s = record["summary"]
    comm = s["comm_per_epoch"]
    grad = comm.get("grad", {}).get("bytes", 0)
    average = comm.get("average", {}).get("bytes", 0)
    return {"H": period, "grad_bytes": grad, "average_bytes": average,
            "sync_bytes": grad + average, "test_acc": s["test_acc"],
            "epoch_time_s": s["epoch_time_s"], "steps_per_epoch": s["steps_per_epoch"]}


def main() -> None:
    p = ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--periods", default="1,4,16")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("extra", nargs="*", help="more gnnpar-train flags (after --)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run(int(h), args.epochs, Path(tmp), args.extra)
                for h in args.periods.split(",")]
    base = rows[0]["sync_bytes"]
    print(f"synthetic:sbm, 2 ranks, batch 256/rank, {rows[0]['steps_per_epoch']} steps per "
          f"epoch, {args.epochs} epochs")
    print(f"{'H':>3} {'grad B/epoch':>14} {'average B/epoch':>16} {'vs H=1':>8} "
          f"{'test acc':>9} {'epoch s':>8}")
    for r in rows:
        r["vs_H1"] = r["sync_bytes"] / base if base else None
        print(f"{r['H']:>3} {r['grad_bytes']:>14,} {r['average_bytes']:>16,} "
              f"{r['vs_H1']:>7.3f}x {r['test_acc']:>9.4f} {r['epoch_time_s']:>8.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
