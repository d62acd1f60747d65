"""The figures the README quotes of its own commands, measured now, each with its date.

Every command is the one the README gives, run as a user runs it (a fresh process, in an
empty directory, timed from outside: from its start to its exit, CPU seconds of all its
processes beside the wall time), next to its reference measured in the same run:

* ``main``: the main job, ``gnnpar-train --nproc 2``, in an empty directory (its partition
  made there): the summary it prints (the README's example), its printed total wall time
  beside the wall time measured from outside;
* ``references``: on the same graph, the features-only MLP and single-process full-batch
  PyG GraphSAGE, the main job's model (2x128, dropout 0.5) trained as ``--mode full``
  trains by default (Adam, learning rate 0.01, 100 epochs): its last and best-valid epoch;
* ``full``: ``gnnpar-train --nproc 2 --mode full``, every other flag at its default;
* ``link``: the README's link command on the synthetic graph, beside full-batch PyG
  GraphSAGE with a dot decoder (``gnnpar/testing/reference.py``, ``test_link.py``'s
  settings): its last and best-valid epoch;
* ``typed``: the README's typed command, beside single-process ``to_hetero`` GraphSAGE and
  homogeneous GraphSAGE on the same graph (``gnnpar/testing/typed_reference.py``, the
  typed test's hyper-parameters);
* ``refusals``: each refusal the README says answers in well under a second (``--help``
  too), ``--repeat`` times: median and slowest wall time, median CPU seconds;
* ``wheel``: the wheel built from this tree, installed as the README installs gnnpar
  (``torch==2.13.0`` first) into a fresh virtual environment, then the main job from it
  in an empty directory: the install's time and the job's;
* ``tests``: the README's test command (``python3 -m pytest -q -m "not slow"``) in this
  tree: its wall time.  Not run unless named (``--only tests``).

The other figures of the README come from the benchmark it names beside each
(``benchmarks/README.md``).  Timings depend on the machine's load: the 1-minute load
average is printed before each command.

    python benchmarks/bench_readme.py [--only main,references,...] [--repeat 5]
                                      [--workdir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

SECTIONS = ("main", "references", "full", "link", "typed", "refusals", "wheel", "tests")
DEFAULT_SECTIONS = SECTIONS[:-1]
TRAIN = [sys.executable, "-m", "gnnpar.train"]
LINK_SPEC = "synthetic:sbm?task=link&nodes=4096"
LINK = [LINK_SPEC, "--task", "link", "--nproc", "2"]
TYPED = ["synthetic:typed", "--nproc", "2", "--eval", "sampled"]
TINY = "synthetic:sbm?nodes=1500&feat_dim=16&classes=4&seed=2"


class Report:
    """Figures as they are measured: printed at once with the date, kept for ``--json``."""

    def __init__(self) -> None:
        self.date = time.strftime("%Y-%m-%d")
        self.figures: list[dict[str, Any]] = []

    def add(self, section: str, figure: str, value: Any, unit: str = "") -> None:
        """Print and keep one figure."""
        shown = f"{value:.4f}" if isinstance(value, float) and not unit else (
            f"{value:.1f}" if isinstance(value, float) else str(value))
        print(f"{self.date}  {section:10s} {figure:58s} {shown}{' ' + unit if unit else ''}",
              flush=True)
        self.figures.append({"date": self.date, "section": section, "figure": figure,
                             "value": value, "unit": unit})


def timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None,
          check: bool = True) -> dict[str, Any]:
    """Run ``cmd`` to its end: its output, exit status, wall and CPU seconds (all processes)."""
    load = round(os.getloadavg()[0], 2)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return {"stdout": proc.stdout, "stderr": proc.stderr, "rc": proc.returncode, "wall": wall,
            "cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "load": load}


def _empty(work: Path, name: str) -> Path:
    d = work / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def _printed_wall(stdout: str) -> float:
    found = re.search(r"total wall time: +([\d.]+) s", stdout)
    if not found:
        raise SystemExit(f"no total wall time in:\n{stdout}")
    return float(found.group(1))


def _record(cwd: Path) -> dict[str, Any]:
    """The record of the one run made in ``cwd`` (``runs/NAME/record.json``)."""
    doc: dict[str, Any] = json.loads(next((cwd / "runs").glob("*/record.json")).read_text())
    return doc


def _command(report: Report, section: str, cmd: list[str], res: dict[str, Any]) -> None:
    print(f"\n$ {' '.join(cmd)}   (load {res['load']})\n{res['stdout']}", flush=True)
    report.add(section, "wall time measured from outside", res["wall"], "s")
    report.add(section, "total wall time printed", _printed_wall(res["stdout"]), "s")
    report.add(section, "CPU time, all processes", res["cpu"], "s")


def main_job(report: Report, work: Path, _: argparse.Namespace) -> None:
    """The main job in an empty directory."""
    d = _empty(work, "main")
    res = timed([*TRAIN, "--nproc", "2"], d)
    _command(report, "main", ["gnnpar-train", "--nproc", "2"], res)
    s = _record(d)["summary"]
    for key in ("test_acc", "test_acc_sampled", "val_acc", "val_acc_sampled"):
        report.add("main", key, s[key])
    best = s["best"]  # the headline: the best (sampled) validation accuracy's epoch
    report.add("main", f"best-valid test_acc (sampled, epoch {best['epoch'] + 1})",
               best["test_acc"])
    report.add("main", "epoch time (mean after the first)", s["epoch_time_s"], "s")
    report.add("main", "sampled edges per second (all ranks)",
               f"{s['sampled_edges_per_s'] / 1e6:.3f}", "M")


def references(report: Report, work: Path, _: argparse.Namespace) -> None:
    """The features-only MLP and full-batch PyG GraphSAGE on the main job's graph."""
    import gnnpar
    from gnnpar.testing import reference as _reference

    ds = gnnpar.load_dataset("synthetic:sbm")
    report.add("references", "features-only MLP, test accuracy",
               _reference.mlp_accuracy(ds, 128))
    t0 = time.perf_counter()
    curve = _reference.full_batch_curve(ds, 128, 100, 0.01)
    took = time.perf_counter() - t0
    best = _reference.best_valid(curve)
    report.add("references", "full-batch PyG GraphSAGE, 100 epochs, test accuracy",
               curve[-1]["test_acc"])
    report.add("references", "full-batch PyG GraphSAGE, best-valid epoch's test accuracy",
               best["test_acc"])
    report.add("references", "full-batch PyG GraphSAGE, best-valid epoch",
               curve.index(best) + 1)
    report.add("references", "full-batch PyG GraphSAGE, 100 epochs, one process", took, "s")
    report.add("references", "full-batch PyG GraphSAGE, 10 epochs at lr 0.005, test accuracy",
               _reference.full_batch_curve(ds, 128, 10, 0.005)[-1]["test_acc"])


def full_mode(report: Report, work: Path, _: argparse.Namespace) -> None:
    """``--mode full`` with its defaults, on the main job's graph."""
    d = _empty(work, "full")
    res = timed([*TRAIN, "--nproc", "2", "--mode", "full"], d)
    _command(report, "full", ["gnnpar-train", "--nproc", "2", "--mode", "full"], res)
    rec = _record(d)
    report.add("full", "epochs, learning rate (defaults)",
               f"{rec['config']['train']['epochs']}, {rec['config']['train']['lr']}")
    report.add("full", "test_acc", rec["summary"]["test_acc"])
    report.add("full", "epoch time (mean after the first)", rec["summary"]["epoch_time_s"],
               "s")


def link(report: Report, work: Path, _: argparse.Namespace) -> None:
    """The README's synthetic link command, and full-batch PyG on the same graph."""
    import gnnpar
    from gnnpar.testing import reference as _reference

    d = _empty(work, "link")
    res = timed([*TRAIN, *LINK], d)
    _command(report, "link", ["gnnpar-train", *LINK], res)
    rec = _record(d)
    s = rec["summary"]
    report.add("link", "test MRR (last epoch)", s["test_mrr"])
    report.add("link", "test MRR per epoch", ", ".join(
        f"{e['test_mrr']:.3f}" for e in rec["epochs"]))
    report.add("link", "steps per epoch", s["steps_per_epoch"])
    report.add("link", "epoch time (mean after the first)", s["epoch_time_s"], "s")
    # tests/train/test_link.py's reference: hidden 64, Adam lr 0.01, 100 full-batch epochs.
    ref = _reference.train_link_reference(gnnpar.load_dataset(LINK_SPEC), 100, 64, 0.01,
                                          every=1)["evals"]
    best = max(ref, key=lambda e: e["val_mrr"])
    report.add("link", "full-batch PyG GraphSAGE + dot, 100 epochs, test MRR",
               ref[-1]["test_mrr"])
    report.add("link", "full-batch PyG GraphSAGE + dot, best-valid test MRR", best["test_mrr"])


def typed(report: Report, work: Path, _: argparse.Namespace) -> None:
    """The README's typed command, and the typed test's references on the same graph."""
    from gnnpar.datasets.synthetic import typed as typed_graph
    from gnnpar.testing import typed_reference as R
    from gnnpar.testing.typed_reference import TYPED as T

    d = _empty(work, "typed")
    res = timed([*TRAIN, *TYPED], d)
    _command(report, "typed", ["gnnpar-train", *TYPED], res)
    report.add("typed", "test_acc (sampled)", _record(d)["summary"]["test_acc"])
    ds = typed_graph()
    report.add("typed", "to_hetero GraphSAGE, full batch, test accuracy",
               R.typed_accuracy(ds, hidden=T["hidden"], epochs=100, lr=T["lr"],
                                sparse_lr=T["sparse_lr"]))
    report.add("typed", "homogeneous GraphSAGE, full batch, test accuracy",
               R.homogeneous_accuracy(ds, hidden=T["hidden"], epochs=100, lr=T["lr"]))


def refusals(report: Report, work: Path, args: argparse.Namespace) -> None:
    """The refusals the README promises in well under a second, from outside."""
    d = _empty(work, "refusals")
    parts = d / "parts"
    subprocess.run([sys.executable, "-m", "gnnpar.partition", TINY, "--num-parts", "2",
                    "--out", str(parts), "--no-progress"], check=True, capture_output=True)
    held = d / "held"
    timed([*TRAIN, str(parts), "--nproc", "2", "--epochs", "1", "--eval", "none",
           "--no-progress", "--out", str(held)], d)
    cases = {
        "--help": ["--help"],
        "a world size that does not fit the partition": [str(parts), "--nproc", "3"],
        "--device cuda without a GPU": [str(parts), "--nproc", "2", "--device", "cuda"],
        "fan-outs that do not fit the layers": ["--nproc", "2", "--fanouts", "10,10,10"],
        "a directory that holds a run": [str(parts), "--nproc", "2", "--out", str(held)],
        "a misspelt flag": ["--nproc", "2", "--learning-rate", "0.1"],
    }
    for what, argv in cases.items():
        runs = []
        for _ in range(args.repeat):
            res = timed([*TRAIN, *argv], d, check=False)
            if res["rc"] not in (0, 1, 2) or (argv != ["--help"] and "Fix:" not in res["stderr"]):
                raise SystemExit(f"{what}: unexpected outcome\n{res['stderr']}")
            runs.append(res)
        walls = [r["wall"] for r in runs]
        report.add("refusals", f"{what}, load {res['load']}: wall median / slowest, CPU",
                   f"{statistics.median(walls):.2f} / {max(walls):.2f}, "
                   f"{statistics.median(r['cpu'] for r in runs):.2f}", "s")
    assert not (d / "runs").exists()


def wheel(report: Report, work: Path, _: argparse.Namespace) -> None:
    """The wheel of this tree in a fresh virtual environment, then the main job from it."""
    d = _empty(work, "wheel")
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (d / "src" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, d / "src" / name)
    timed([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(d / "dist"),
           str(d / "src")], d)
    built = next((d / "dist").glob("gnnpar-*.whl"))
    timed([sys.executable, "-m", "venv", str(d / "venv")], d)
    py = str(d / "venv" / "bin" / "python")
    install = [timed([py, "-m", "pip", "install", "-q", "torch==2.13.0"], d),
               timed([py, "-m", "pip", "install", "-q", str(built)], d)]
    report.add("wheel", "install: torch==2.13.0, then the wheel and its dependencies",
               sum(r["wall"] for r in install), "s")
    job = _empty(work, "wheel-job")
    res = timed([str(d / "venv" / "bin" / "gnnpar-train"), "--nproc", "2"], job)
    _command(report, "wheel", ["gnnpar-train", "--nproc", "2"], res)
    report.add("wheel", "install and main job together",
               sum(r["wall"] for r in install) + res["wall"], "s")


def tests(report: Report, work: Path, _: argparse.Namespace) -> None:
    """The README's test command, in this tree."""
    res = timed([sys.executable, "-m", "pytest", "-q", "-m", "not slow"], REPO, check=False)
    print(res["stdout"][-2000:])
    report.add("tests", f"python3 -m pytest -q -m 'not slow' (exit {res['rc']}, load "
               f"{res['load']})", res["wall"] / 60, "min")


RUNNERS: dict[str, Callable[[Report, Path, argparse.Namespace], None]] = {
    "main": main_job, "references": references, "full": full_mode, "link": link,
    "typed": typed, "refusals": refusals, "wheel": wheel, "tests": tests}


def main() -> None:
    """Measure the sections asked for; print each figure with its date."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--only", default=",".join(DEFAULT_SECTIONS),
                   help=f"comma-separated sections of {', '.join(SECTIONS)}")
    p.add_argument("--repeat", type=int, default=5, help="runs of each refusal")
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    chosen = args.only.split(",")
    unknown = set(chosen) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-readme-"))
    report = Report()
    print(f"{report.date}: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
          f"work in {work}", flush=True)
    for name in chosen:
        RUNNERS[name](report, work, args)
    if args.json:
        Path(args.json).write_text(json.dumps(report.figures, indent=1))


if __name__ == "__main__":
    main()
