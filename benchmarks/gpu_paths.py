"""Every user path of gnnpar on CUDA beside the same run on the CPU: one call, one table.

Run by ``benchmarks/gpu_check.sh`` on a machine with a GPU, or on any CPU as a dry run::

    python benchmarks/gpu_paths.py --out OUT [--budget-s 240] [--dry-run]

Each path runs the user's commands as a user types them (``gnnpar-train``,
``gnnpar-predict``, ``gnnpar-export``, each with ``--nproc 1``), once with ``--device cuda``
(NCCL) and once with ``--device cpu`` (gloo), with the same seeds.  The two lanes run side
by side, each command in a session of its own with its own timeout and its own entry in
the results, so one failure hides nothing else:

======  ==================================================================================
main    the main job, ``gnnpar-train --nproc 1 --device D --save-predictions
        --save-embeddings --epochs 5`` on the default graph, as a user types it
        (collectives of one rank skipped); then ``gnnpar-predict`` of that run on another graph, and
        ``gnnpar-export``, whose model, rebuilt in a plain PyG process, must give the
        logits the run saved
full    ``--mode full``: halo exchange on the whole graph
grid    ``--mode full --grid 1,1,1``: the 3D layers, on a grid that fits one GPU
link    ``--task link --strict-negatives`` on a saved dataset with edge features
typed   ``synthetic:typed``: featureless authors and venues learn sharded embeddings
bf16    ``--precision bf16`` on a ``--feature-dtype bf16`` partition
resume  a run SIGKILLed right after its first mid-epoch checkpoint and continued with
        ``--resume``, against the same run uninterrupted: the same final weights
======  ==================================================================================

Every path but ``main`` (whose commands run as typed) runs with
``GNNPAR_FORCE_COLLECTIVES=1``, so that at world size 1 every collective still goes through
NCCL.  Figures come from each run's
``OUT/record.json`` (read with :class:`~gnnpar.train.record.RunRecord`), CUDA beside CPU.
The checks: each run ended complete, on the device asked for; the final metric (test
accuracy, or test MRR of the link path) within 1 point of the CPU twin; the predictions
written and read back; the exported model's logits equal to the saved ones (within 1e-3
of the largest); the
resumed weights equal to the uninterrupted run's (bitwise on the CPU; on CUDA, whose
sums may run in no fixed order, no further from it than a second uninterrupted run).

``OUT/paths.json`` (every command, its figures and output tail, every check) and
``OUT/paths.md`` (the same as tables) are rewritten after every command; the exit status
is 0 when every command ran and every check held.  ``--dry-run`` runs each path once on
the CPU with tiny graphs and compares it with itself: every command still starts, every
record parses and both files are written, so a renamed flag or a moved module fails in CI
(``tests/test_gpu_check.py``), not on a GPU lease.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _measure import (  # benchmarks/ is the script directory
    Outcome,
    command,
    run_bounded,
    stop_on_sigterm,
)

from gnnpar.artifacts.kinds import RECORD_FILE
from gnnpar.config import ArgumentParser
from gnnpar.datasets.synthetic import sbm
from gnnpar.train.record import RunRecord

PATHS = ("main", "resume", "link", "typed", "full", "bf16", "grid")
"""The paths, longest first (each lane runs them in this order)."""
DRY_LANES = (("main", "full", "grid"), ("resume", "link", "typed", "bf16"))
"""A dry run's two lanes (one device): six commands each."""
POINT = 0.01
"""The most a CUDA run's final metric may differ from its CPU twin's (1 point)."""
PLAIN_PYG = """
import json, sys, numpy as np, torch, torch_geometric.nn.models as models
spec_file, graph_file, device = sys.argv[1:]
spec = json.load(open(spec_file))
model = getattr(models, spec["class"])(**spec["kwargs"])
model.load_state_dict(torch.load(spec_file[:-5] + ".pt", weights_only=True))
model.eval().to(device)
g = np.load(graph_file)
x, ei = (torch.from_numpy(g[k]).to(device) for k in ("x", "edge_index"))
with torch.no_grad():
    logits = model(x, ei).cpu().numpy()
print(json.dumps({"max_diff": float(np.abs(logits - g["logits"]).max()),
                  "scale": float(np.abs(g["logits"]).max()),
                  "agree": float((logits.argmax(1) == g["pred"]).mean())}))
"""
"""The README's five lines that rebuild an exported model without gnnpar, then every
node's logits on the training graph (a process of its own: no gnnpar import)."""
LOGIT_RTOL = 1e-3
"""The most the exported model's logits may differ from the run's saved ones, relative to
the largest (the same weights, summed in another order)."""


@dataclass(frozen=True)
class Sizes:
    """The graphs and flags of one profile (the GPU check's, or the dry run's)."""

    main: tuple[str, ...]
    """Dataset and flags of the main job (no dataset: the default graph)."""
    other: str
    """The graph ``gnnpar-predict`` applies the main job's model to."""
    node: str
    """The small node-classification graph of the other paths."""
    flags: tuple[str, ...]
    """Model and sampling flags of the small paths."""
    epochs: int
    full_epochs: int
    typed: str
    link_nodes: int
    resume_flags: tuple[str, ...]
    """Sampling and checkpoint flags of the resume path (several mid-epoch checkpoints)."""
    timeout_s: float
    """Timeout of one command."""


GPU = Sizes(main=("--epochs", "5"), other="synthetic:sbm?seed=7",
            node="synthetic:sbm?nodes=10000&feat_dim=32&classes=8&seed=5&homophily=0.6",
            flags=("--hidden", "64"), epochs=4, full_epochs=60,
            typed="synthetic:typed?papers=3000&authors=1500&venues=60", link_nodes=3000,
            resume_flags=("--epochs", "3", "--batch-size", "256", "--checkpoint-steps", "4"),
            timeout_s=150)
DRY = Sizes(main=("synthetic:sbm?nodes=600&feat_dim=8&classes=4&seed=2", "--epochs", "2",
                  "--hidden", "16", "--fanouts", "5,5", "--batch-size", "64"),
            other="synthetic:sbm?nodes=500&feat_dim=8&classes=4&seed=7",
            node="synthetic:sbm?nodes=600&feat_dim=8&classes=4&seed=2",
            flags=("--hidden", "16", "--fanouts", "5,5", "--batch-size", "64"), epochs=2,
            full_epochs=3, typed="synthetic:typed?papers=300&authors=150&venues=12",
            link_nodes=400,
            resume_flags=("--epochs", "3", "--batch-size", "32", "--checkpoint-steps", "2"),
            timeout_s=60)


@dataclass
class Step:
    """One command of one path on one device, and what came of it."""

    path: str
    step: str
    device: str
    cmd: list[str]
    forced: bool
    status: str = "skipped"
    rc: int | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)
    tail: str = ""


@dataclass
class Check:
    """One claim about the results, and whether it held."""

    path: str
    device: str
    check: str
    value: Any
    ok: bool


class Results:
    """Everything so far, rewritten into ``paths.json`` and ``paths.md`` at each change."""

    def __init__(self, out: Path, head: dict[str, Any]) -> None:
        self.out, self.head = out, head
        self.steps: list[Step] = []
        self.checks: list[Check] = []
        self.lock = threading.Lock()

    def add(self, item: Step | Check) -> None:
        with self.lock:
            if isinstance(item, Step):
                self.steps.append(item)
            else:
                self.checks.append(item)
            self.write()

    def write(self) -> None:
        doc = {**self.head, "load_avg_end": os.getloadavg(),
               "steps": [asdict(s) for s in self.steps],
               "checks": [asdict(c) for c in self.checks],
               "ok": self.ok()}
        for name, text in (("paths.json", json.dumps(doc, indent=1, default=str) + "\n"),
                           ("paths.md", self.markdown())):
            tmp = self.out / f".{name}.tmp"
            tmp.write_text(text)
            os.replace(tmp, self.out / name)

    def ok(self) -> bool:
        return all(s.status == "ok" for s in self.steps) and all(c.ok for c in self.checks)

    def markdown(self) -> str:
        h = self.head
        devices = ["cpu"] if h["dry_run"] else [h["device"], "cpu"]
        lines = [f"# gnnpar's user paths: {' beside '.join(devices)} ({h['date']})", "",
                 f"{h['gpu']}; torch {h['torch']} (CUDA {h['cuda']}), Python {h['python']}, "
                 f"{h['cpus']} CPU cores, load {h['load_avg_start'][0]:.1f} at the start"
                 + (" (dry run: each path once, on the CPU, compared with itself)."
                    if h["dry_run"] else "; each cell: " + " / ".join(devices) + "."),
                 "", "| path | step | status | metric | epoch s | sampled edges/s | peak GPU "
                 "| wall s (CPU s) |", "|---|---|---|---:|---:|---:|---:|---:|"]
        by = {(s.path, s.step, s.device): s for s in self.steps}
        for path, step in dict.fromkeys((s.path, s.step) for s in self.steps):
            row = [by.get((path, step, d)) for d in devices]

            def cells(fn: Callable[[Step], str], row: list[Step | None] = row) -> str:
                return " / ".join("-" if s is None else fn(s) for s in row)

            first = next(s for s in row if s is not None)
            lines.append(
                f"| {path} | {step}{' (forced)' if first.forced else ''} | "
                f"{cells(lambda s: s.status)} | "
                f"{cells(lambda s: _num(s.figures.get('metric'), '.4f'))} "
                f"{first.figures.get('metric_name', '')} | "
                f"{cells(lambda s: _num(s.figures.get('epoch_time_s'), '.3f'))} | "
                f"{cells(lambda s: _num(s.figures.get('sampled_edges_per_s'), '.3g'))} | "
                f"{cells(lambda s: _gib(s.figures.get('peak_gpu_bytes')))} | "
                f"{cells(lambda s: f'{s.wall_s:.1f} ({s.cpu_s:.1f})')} |")
        lines += ["", "| path | device | check | value | |", "|---|---|---|---|---|"]
        lines += [f"| {c.path} | {c.device} | {c.check} | {c.value} | "
                  f"{'ok' if c.ok else '**failed**'} |" for c in self.checks]
        for s in self.steps:
            if s.status != "ok":
                lines += ["", f"## {s.path} / {s.step} on {s.device}: {s.status} (rc {s.rc})",
                          "", "```", " ".join(s.cmd), s.tail, "```"]
        return "\n".join(lines) + "\n"


def _num(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def figures(run: Path) -> dict[str, Any]:
    """What a run record says: status, device, metric, epoch time, memory (partial too)."""
    r = RunRecord.load(run / RECORD_FILE)
    s = r.summary or {}
    last = r.epochs[-1] if r.epochs else {}
    link = r.config.get("data", {}).get("task") == "link"
    name = "test_mrr" if link else "test_acc"
    return {"status": r.status, "epochs": len(r.epochs), "backend": r.env.get("backend"),
            "device": r.env.get("device"), "metric_name": name,
            "metric": s.get(name, last.get(name)),
            "epoch_time_s": s.get("epoch_time_s", last.get("epoch_time_s")),
            "sampled_edges_per_s": s.get("sampled_edges_per_s",
                                         last.get("sampled_edges_per_s")),
            "peak_gpu_bytes": (s.get("peak_memory_bytes") or {}).get("device"),
            "peak_host_bytes": (s.get("peak_memory_bytes") or {}).get("host"),
            "wall_time_s": s.get("wall_time_s"), "startup_s": s.get("startup_s")}


@dataclass
class Lane:
    """Where and how one device's commands run."""

    device: str
    work: Path
    sizes: Sizes
    threads: int
    deadline: float
    results: Results

    def run(self, path: str, step: str, cmd: list[str], *, forced: bool,
            run_dir: Path | None = None, stop: Callable[[], bool] | None = None) -> Step:
        """Run one command (bounded by its timeout and the deadline), record its step."""
        s = Step(path, step, self.device, [str(c) for c in cmd], forced)
        left = self.deadline - time.monotonic()
        if left < 5:
            s.tail = "not started: the paths' time budget is spent"
            self.results.add(s)
            return s
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if forced:
            env["GNNPAR_FORCE_COLLECTIVES"] = "1"
        else:
            env.pop("GNNPAR_FORCE_COLLECTIVES", None)
        o: Outcome = run_bounded(s.cmd, cwd=self.work, env=env,
                                 timeout_s=min(self.sizes.timeout_s, left),
                                 log=self.log(path, step), stop=stop)
        s.status, s.rc, s.wall_s, s.cpu_s, s.tail = o.status, o.rc, o.wall_s, o.cpu_s, o.tail
        planned = stop is not None and s.status == "stopped"
        if planned:
            s.status, s.tail = "ok", f"{s.tail}\n(SIGKILLed as planned)"
        elif stop is not None and s.status == "ok":
            s.status, s.tail = "failed", f"{s.tail}\nit ended before it could be killed"
        if run_dir is not None and (run_dir / RECORD_FILE).is_file():
            try:
                s.figures = figures(run_dir)
            except Exception as exc:  # noqa: BLE001 - a record that does not parse is a result
                s.status, s.tail = "failed", f"{s.tail}\nrecord: {exc}"
        if s.status == "ok" and run_dir is not None and not planned and \
                s.figures.get("status") != "complete":
            s.status = "failed"
            s.tail += f"\nrecord status {s.figures.get('status')!r}, not complete"
        self.results.add(s)
        return s

    def log(self, path: str, step: str) -> Path:
        """Where a command's output goes (the work folder: not one of the result files)."""
        return self.work / "logs" / f"{path}-{step}.log"

    def train(self, path: str, step: str, flags: list[str], out: Path, *, forced: bool = True,
              stop: Callable[[], bool] | None = None) -> Step:
        """``gnnpar-train FLAGS --nproc 1 --device D --out OUT`` (the run is checked for its
        device: a CUDA run that fell back to the CPU is a failure)."""
        cmd = [*command("gnnpar-train"), *flags, "--nproc", "1", "--device", self.device,
               "--threads", str(self.threads), "--no-progress", "--root",
               str(self.work / "data"), "--out", str(out)]
        s = self.run(path, step, cmd, forced=forced, run_dir=out, stop=stop)
        want = "nccl" if self.device == "cuda" else "gloo"
        if s.figures:
            self.check(path, "ran on the device asked for",
                       f"{s.figures['device']} ({s.figures['backend']})",
                       str(s.figures["device"]).startswith(self.device)
                       and s.figures["backend"] == want, step)
        return s

    def check(self, path: str, what: str, value: Any, ok: bool, step: str = "") -> None:
        self.results.add(Check(path, self.device, f"{step}: {what}" if step else what,
                               value, bool(ok)))


# ---------------------------------------------------------------------- the paths
def main_path(lane: Lane) -> None:
    """The main job, its predictions on another graph, its model exported."""
    z, runs = lane.sizes, lane.work / "runs"
    run = runs / "main"
    s = lane.train("main", "train", [*z.main, "--save-predictions", "--save-embeddings"], run,
                   forced=False)
    if s.status != "ok":
        return
    import gnnpar

    saved = gnnpar.load_predictions(run)
    width = None if saved.embeddings is None else saved.embeddings.shape[1]
    lane.check("main", "predictions read back (rows x embedding width)",
               f"{saved.num_nodes} x {width}", saved.pred is not None and width is not None)
    out = runs / "predict-other"  # a new directory: nothing to replace
    p = lane.run("main", "predict", [*command("gnnpar-predict"), str(run), z.other, "--nproc",
                                      "1", "--device", lane.device, "--root",
                                      str(lane.work / "data"), "--out", str(out)], forced=False)
    if p.status == "ok":
        index = json.loads((out / "index.json").read_text())
        lane.check("main", "gnnpar-predict: accuracy on the other graph (chance)",
                   index.get("accuracy"), bool(index.get("accuracy")))
    model = runs / "export" / "model.pt"
    e = lane.run("main", "export", [*command("gnnpar-export"), str(run), "--out", str(model)],
                 forced=False)
    if e.status != "ok":
        return
    spec = run / "config.json"
    dataset = json.loads(spec.read_text())["data"]["dataset"]
    graph = gnnpar.load_dataset(dataset).to_pyg()
    npz = runs / "export" / "graph.npz"
    np.savez(npz, x=graph.x.numpy(), edge_index=graph.edge_index.numpy(),
             logits=saved.logits, pred=saved.pred)
    plain = lane.run("main", "plain-pyg", [sys.executable, "-c", PLAIN_PYG,
                                           str(model.with_suffix(".json")), str(npz),
                                           lane.device], forced=False)
    if plain.status == "ok":
        got = json.loads(plain.tail.splitlines()[-1])
        lane.check("main", "exported model in plain PyG: the saved logits (max |diff|)",
                   f"{got['max_diff']:.3g} of {got['scale']:.3g}; classes {got['agree']:.4f} "
                   "equal", got["max_diff"] <= LOGIT_RTOL * got["scale"])


def full_path(lane: Lane) -> None:
    z = lane.sizes
    lane.train("full", "train", [z.node, "--mode", "full", *z.flags[:2], "--epochs",
                                 str(z.full_epochs), "--lr", "0.02"], lane.work / "runs" / "full")


def grid_path(lane: Lane) -> None:
    z = lane.sizes
    lane.train("grid", "train", [z.node, "--mode", "full", "--grid", "1,1,1", "--model", "gcn",
                                 *z.flags[:2], "--epochs", str(z.full_epochs), "--lr", "0.02"],
               lane.work / "runs" / "grid")


def link_path(lane: Lane) -> None:
    """Link prediction with strict negatives on a saved graph with 3 edge features."""
    z = lane.sizes
    data = lane.work / "data" / "link-edge-features"
    if not data.is_dir():
        ds = sbm(num_nodes=z.link_nodes, seed=1, task="link")
        rng = np.random.default_rng(0)
        replace(ds, edge_attr=rng.standard_normal((ds.num_edges, 3)).astype(np.float32)
                ).save(data)
    lane.train("link", "train", [str(data), "--task", "link", "--strict-negatives",
                                 *z.flags, "--epochs", str(z.epochs)],
               lane.work / "runs" / "link")


def typed_path(lane: Lane) -> None:
    z = lane.sizes
    lane.train("typed", "train", [z.typed, "--eval", "sampled", *z.flags,
                                  "--epochs", str(z.epochs)], lane.work / "runs" / "typed")


def bf16_path(lane: Lane) -> None:
    z = lane.sizes
    lane.train("bf16", "train", [z.node, "--feature-dtype", "bf16", "--precision", "bf16",
                                 *z.flags, "--epochs", str(z.epochs)],
               lane.work / "runs" / "bf16")


def _position(run: Path) -> tuple[int, int] | None:
    """``(epoch, step)`` of the run's newest checkpoint, read as the run writes it."""
    try:
        doc = json.loads((run / "checkpoint" / "state.json").read_text())
        pos = doc["state"]["extra"]["position"]
        return int(pos["epoch"]), int(pos["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest difference between two state dicts' tensors (inf: other keys)."""
    if a.keys() != b.keys():
        return float("inf")
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def resume_path(lane: Lane) -> None:
    """SIGKILL after the first mid-epoch checkpoint, ``--resume``, the same final weights.

    On CUDA the uninterrupted run runs twice: how far two runs of the same command land
    apart (scatter sums in no fixed order) is what the resumed one may differ by.
    """
    from gnnpar.train.checkpoint import read_model_state

    z, runs = lane.sizes, lane.work / "runs"
    flags = [z.node, *z.flags[:2], *z.resume_flags]
    ref = lane.train("resume", "uninterrupted", flags, runs / "resume-ref")
    again = lane.train("resume", "uninterrupted-again", flags, runs / "resume-again") \
        if lane.device == "cuda" else None
    killed = runs / "resume-killed"
    k = lane.train("resume", "killed", flags, killed,
                   stop=lambda: (_position(killed) or (0, 0))[1] > 0)
    at = _position(killed)
    lane.check("resume", "SIGKILLed with a mid-epoch checkpoint (epoch, step)", at,
               k.status == "ok" and at is not None and at[1] > 0)
    r = lane.run("resume", "resumed", [*command("gnnpar-train"), "--config",
                                       str(killed / "config.json"), "--resume"],
                 forced=True, run_dir=killed)
    said = re.search(r"resumed from \S+ at epoch (\d+), step (\d+)",
                     lane.log("resume", "resumed").read_text(errors="replace"))
    lane.check("resume", "resumed from that checkpoint (epoch, step)",
               said and (int(said[1]) - 1, int(said[2])),
               said is not None and at is not None and (int(said[1]) - 1, int(said[2])) == at)
    if ref.status != "ok" or r.status != "ok" or (again is not None and again.status != "ok"):
        return
    a = read_model_state(runs / "resume-ref" / "checkpoint")
    diff = _max_diff(a, read_model_state(killed / "checkpoint"))
    noise = 0.0 if again is None else _max_diff(
        a, read_model_state(runs / "resume-again" / "checkpoint"))
    lane.check("resume", "final weights against the uninterrupted run (max |diff|)",
               "bitwise equal" if diff == 0 else
               f"{diff:.3g}; two uninterrupted runs: {noise:.3g}", diff <= 2 * noise)


PATH_RUNS: dict[str, Callable[[Lane], None]] = {
    "main": main_path, "resume": resume_path, "full": full_path, "grid": grid_path,
    "link": link_path, "typed": typed_path, "bf16": bf16_path}


def _guarded(lane: Lane, name: str) -> None:
    """One path; an exception of the driver itself is recorded, and the lane goes on."""
    try:
        PATH_RUNS[name](lane)
    except Exception as exc:  # noqa: BLE001 - one path's failure must not hide the others
        lane.results.add(Step(name, "driver", lane.device, [], False, "failed",
                              tail=f"{type(exc).__name__}: {exc}"))


def _run_lane(jobs: list[tuple[Lane, str]]) -> None:
    for lane, name in jobs:
        _guarded(lane, name)


def compare(results: Results, device: str) -> None:
    """Each path's final metric on ``device`` against its CPU twin (within 1 point)."""
    runs = {(s.path, s.step, s.device): s for s in results.steps if s.figures}
    for (path, step, dev), s in sorted(runs.items()):
        twin = runs.get((path, step, "cpu"))
        if dev != device or twin is None or step in ("killed",):
            continue
        a, b = s.figures.get("metric"), twin.figures.get("metric")
        if a is None or b is None:
            continue
        name = s.figures["metric_name"]
        results.add(Check(path, device, f"{step}: {name} within 1 point of the CPU twin",
                          f"{a:.4f} vs {b:.4f} ({(a - b) * 100:+.2f} pt)",
                          abs(a - b) <= POINT + 1e-9))


def parse_args() -> argparse.Namespace:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder of paths.json and paths.md")
    p.add_argument("--work", default=None, help="runs and data (default: a new temporary "
                   "folder under /tmp)")
    p.add_argument("--budget-s", type=float, default=240.0,
                   help="no command starts after this many seconds")
    p.add_argument("--dry-run", action="store_true",
                   help="tiny graphs, on the CPU, each path once (compared with itself)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per run (default: a quarter of the cores)")
    p.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    stop_on_sigterm()
    t0 = time.monotonic()
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_paths.py needs a CUDA GPU; this torch sees none "
                         "(--dry-run runs it on the CPU).")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gnnpar-gpu-paths-") as tmp:
        return run_paths(args, device, out, Path(args.work or tmp), t0)


def run_paths(args: argparse.Namespace, device: str, out: Path, work: Path,
              t0: float) -> int:
    """Every path on every lane, then the comparisons; the exit status."""
    cpus = os.cpu_count() or 1
    head = {"date": time.strftime("%Y-%m-%d %H:%M"), "dry_run": args.dry_run,
            "device": device, "gpu": torch.cuda.get_device_name(0) if device == "cuda"
            else "no GPU (dry run)", "torch": torch.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version(), "cpus": cpus,
            "load_avg_start": os.getloadavg(), "work": str(work)}
    results = Results(out, head)
    sizes = DRY if args.dry_run else GPU
    threads = args.threads or max(1, cpus // 4)
    names = [n for n in PATHS if n in args.paths.split(",")]
    lanes: list[list[tuple[Lane, str]]]
    deadline = t0 + args.budget_s
    if args.dry_run:  # one device: the paths shared between two lanes
        lane = Lane("cpu", work / "cpu", sizes, threads, deadline, results)
        lanes = [[(lane, n) for n in share if n in names] for share in DRY_LANES]
    else:  # the CUDA commands beside their CPU twins
        lanes = [[(Lane(d, work / d, sizes, threads, deadline, results), n) for n in names]
                 for d in ("cuda", "cpu")]
    for lane_jobs in lanes:
        for lane, _ in lane_jobs:
            (lane.work / "runs").mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(len(lanes)) as pool:
        for f in [pool.submit(_run_lane, jobs) for jobs in lanes]:
            f.result()
    compare(results, device if not args.dry_run else "cpu")
    results.write()
    bad = [f"{s.path}/{s.step}/{s.device}: {s.status}" for s in results.steps
           if s.status != "ok"] + [f"{c.path}/{c.device}: {c.check}" for c in results.checks
                                   if not c.ok]
    print(f"paths: {len(results.steps)} commands, {len(results.checks)} checks, "
          f"{time.monotonic() - t0:.0f} s; " + ("all ok" if not bad else
                                                 "not ok: " + "; ".join(bad)), flush=True)
    return 0 if results.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
