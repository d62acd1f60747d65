"""The README's multi-machine recipe on one host against ``gnnpar-train --nproc 2``.

The same partition trained the same way, started two ways, in paired interleaved rounds
(the order rotates every round):

* ``launcher``: ``gnnpar-train PART --nproc 2`` (gnnpar's own launcher; the reference);
* ``torchrun``: the README's recipe on one host as 2 nodes: two ``torchrun --nnodes 2
  --nproc-per-node 1 --rdzv-backend c10d`` agents, one rendezvous endpoint on loopback;
* ``standalone``: ``torchrun --standalone --nproc-per-node 2``, one machine as DGL's and
  PyTorch's documentation launch it (each worker leads a session of its own).

On a machine that other sessions load, where the kernel shares the CPU between sessions
first (``kernel.sched_autogroup_enabled``, logged), how the launcher places its ranks
decides their share: run it with ``--before`` a change to the launcher.

With ``--before REV`` each is also run on the code of git revision ``REV`` (its
``gnnpar/``, ``datasets/`` and ``partition/``, put first on ``PYTHONPATH``) in the same
rounds: before and after a change, side by side.  Each run's record gives the epoch time
and its sampling share (means after the first epoch), its torch threads and its losses
(equal in every run: the same training); the run's CPU seconds (all its processes) are
taken beside the wall time.  Reported: the median of each variant's per-round ratio to
the launcher's run of this tree, with the 1-minute load before every run.

    python benchmarks/bench_torchrun.py [--before REV] [--rounds 4] [--epochs 10]
                                        [--workdir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WAYS = ("launcher", "torchrun", "standalone")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def checkout(rev: str, where: Path) -> Path:
    """The package of git revision ``rev`` laid out as installed (for ``PYTHONPATH``)."""
    if not (where / "gnnpar").is_dir():
        where.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", rev, "gnnpar",
                                  "datasets", "partition"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
        for stage in ("datasets", "partition"):  # installed as gnnpar.<stage> (setup.py)
            (where / stage).rename(where / "gnnpar" / stage)
    return where


def autogroup() -> str:
    """``kernel.sched_autogroup_enabled`` (``"-"``: not this kernel's)."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    except OSError:
        return "-"


def _commands(way: str, part: Path, out: Path, epochs: int) -> list[list[str]]:
    """The processes one run starts (each waited for), as a user types them."""
    train = [str(part), "--out", str(out), "--no-progress", "--epochs", str(epochs)]
    if way == "launcher":
        return [[sys.executable, "-m", "gnnpar.train", *train, "--nproc", "2"]]
    if way == "standalone":
        return [[sys.executable, "-m", "torch.distributed.run", "--standalone",
                 "--nproc-per-node", "2", "-m", "gnnpar.train", *train]]
    return [[sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
             "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
             f"127.0.0.1:{_free_port()}", "--rdzv-id", out.name, "-m", "gnnpar.train",
             *train]] * 2


def run_once(way: str, code: Path | None, part: Path, out: Path,
             epochs: int) -> dict[str, Any]:
    """One run: its record's figures, wall and CPU seconds of all its processes."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # From the work directory: ``python -m`` puts the current one first on sys.path, and
    # in the source tree that is this tree's gnnpar, whatever PYTHONPATH says.
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, cwd=out.parent)
             for cmd in _commands(way, part, out, epochs)]
    logs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if any(p.returncode for p in procs):
        raise SystemExit(f"{way} failed:\n" + "\n".join(logs))
    rec = json.loads((out / "record.json").read_text())
    s = rec["summary"]
    return {"epoch_s": s["epoch_time_s"], "sample_s": s["step_time_s"]["sample"],
            "wall_s": wall, "cpu_s": (after.ru_utime + after.ru_stime)
            - (before.ru_utime + before.ru_stime),
            "torch_threads": rec["env"]["torch_threads"],
            "losses": [round(e["train_loss"], 6) for e in rec["epochs"]]}


def main() -> None:
    """Run the variants in interleaved rounds; print medians of per-round ratios."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--before", default=None, help="git revision to compare with")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-torchrun-"))
    code: dict[str, Path | None] = {"": None}
    if args.before:
        code[f" ({args.before})"] = checkout(args.before, work / f"code-{args.before}")
    variants = [(way, tag) for tag in code for way in WAYS]
    part = work / "sbm-2"
    if not (part / "meta.json").is_file():
        subprocess.run([sys.executable, "-m", "gnnpar.partition", "synthetic:sbm",
                        "--num-parts", "2", "--out", str(part), "--no-progress"], check=True)
    runs: dict[str, list[dict[str, Any]]] = {w + t: [] for w, t in variants}
    loads: list[float] = []
    for r in range(args.rounds + 1):  # round 0 warms the caches (numba, page cache)
        for i in range(len(variants)):
            way, tag = variants[(i + r) % len(variants)]
            load = round(os.getloadavg()[0], 2)
            res = run_once(way, code[tag], part, work / f"run-{r}-{i}", args.epochs)
            if r:
                res["load"] = load
                loads.append(load)
                runs[way + tag].append(res)
            print(f"round {r}{' (warm-up)' if not r else ''} {way + tag:24s} epoch "
                  f"{res['epoch_s']:.2f} s, sample {res['sample_s']:.3f} s, wall "
                  f"{res['wall_s']:.1f} s, CPU {res['cpu_s']:.1f} s, "
                  f"{res['torch_threads']} threads, load {load}", flush=True)
    base = runs["launcher"]
    same = all(r["losses"] == base[0]["losses"] for rs in runs.values() for r in rs)
    table: dict[str, Any] = {}
    print(f"\n{time.strftime('%Y-%m-%d')}: synthetic:sbm, 2 ranks on {os.cpu_count()} cores, "
          f"{args.epochs} epochs, {args.rounds} rounds, load {min(loads)}-{max(loads)}, "
          f"sched_autogroup_enabled {autogroup()}; equal losses in every run: {same}")
    print(f"{'':24s} {'epoch s':>8s} {'sample s':>9s} {'wall s':>7s} {'CPU s':>6s} "
          f"{'threads':>7s} {'epoch / launcher':>17s} {'sample / launcher':>18s}")
    for name, rs in runs.items():
        row: dict[str, Any] = {k: statistics.median(r[k] for r in rs)
                               for k in ("epoch_s", "sample_s", "wall_s", "cpu_s")}
        for k in ("epoch_s", "sample_s", "wall_s"):
            row[f"{k}_ratio"] = statistics.median(
                a[k] / b[k] for a, b in zip(rs, base, strict=True))
        row["threads"] = sorted({r["torch_threads"] for r in rs})
        table[name] = row
        print(f"{name:24s} {row['epoch_s']:8.2f} {row['sample_s']:9.3f} {row['wall_s']:7.1f} "
              f"{row['cpu_s']:6.1f} {','.join(map(str, row['threads'])):>7s} "
              f"{row['epoch_s_ratio']:16.2f}x {row['sample_s_ratio']:17.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M"), "epochs": args.epochs,
            "before": args.before, "loads": loads, "autogroup": autogroup(),
            "equal_losses": same, "medians": table, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
