"""The bad-input and fault campaign: how each damaged input and each fault ends.

Run (a few minutes; never in CI)::

    python benchmarks/bench_reliability.py [--json OUT] [--workdir DIR] [--no-faults]

Every case runs the real command (``gnnpar-train``, ``gnnpar-partition``) on something a
user, a disk or a cluster could hand it — a damaged file, a wrong flag, a hostile spec, a
rank killed or stopped — and is classified by how it ended:

* **clear error**: exit status 1 (2: a command line argparse cannot parse) and exactly
  one ``error:`` line on stderr that names a ``Fix:``, no traceback;
* **unclear**: any other failure (a traceback, an abort, several error lines);
* **accepted silently**: exit status 0 although the input is bad;
* for the valid inputs among them (``expect ok``): **ok** or **failed**.

It prints one line per case and the counts, the figures of issue 11's campaign table
(faults survived, inputs with a clear error, silent acceptances).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.datasets.synthetic import sbm
from gnnpar.io import sha256_file, write_digested_json
from gnnpar.partition import partition_graph

TRAIN = ["--hidden", "8", "--epochs", "1", "--no-progress", "--timeout-s", "30"]


def _tool(name: str) -> list[str]:
    exe = shutil.which(name)
    module = {"gnnpar-train": "gnnpar.train", "gnnpar-partition": "gnnpar.partition"}[name]
    return [exe] if exe else [sys.executable, "-m", module]


@dataclass
class Case:
    """One input or fault: what it is, the command, whether it should succeed."""

    group: str
    name: str
    argv: Callable[[Path], list[str]]
    expect_ok: bool = False
    fault: str | None = None  # "SIGKILL" / "SIGSTOP" of rank 1 once training runs


def classify(code: int, err: str, expect_ok: bool) -> str:
    """``clear error``, ``unclear``, ``accepted silently``, ``ok`` or ``failed``."""
    if expect_ok:
        return "ok" if code == 0 else "failed"
    if code == 0:
        return "accepted silently"
    errors = [ln for ln in err.splitlines() if "error:" in ln]
    # 1, or argparse's 2 for a command line it cannot parse (after its usage line).
    return "clear error" if code in (1, 2) and len(errors) == 1 and "Traceback" not in err \
        and "Fix:" in errors[0] else "unclear"


# ----------------------------------------------------------------------------- inputs
class Inputs:
    """The files of the campaign, made once in ``work``."""

    def __init__(self, work: Path) -> None:
        self.work = work
        ds = sbm(num_nodes=1200, avg_degree=8, num_classes=4, feat_dim=8, seed=3)
        self.ds = ds
        self.good = work / "good-parts"
        partition_graph(ds, 2, self.good)
        pairs = zip(ds.src.tolist(), ds.dst.tolist(), strict=True)
        self.edges = work / "edges.csv"
        self.edges.write_text("src,dst\n" + "".join(f"{s},{t}\n" for s, t in pairs))
        np.save(work / "x.npy", np.asarray(ds.x))
        (work / "y.csv").write_text("".join(f"{v}\n" for v in np.asarray(ds.y)))
        self.saved = work / "saved"
        ds.save(self.saved)

    def copy(self, name: str) -> Path:
        """A fresh copy of the good partition, to damage."""
        out = self.work / name
        shutil.copytree(self.good, out)
        return out

    def part_file(self, name: str, rel: str, change: Callable[[np.ndarray], np.ndarray],
                  checksum: bool) -> Path:
        """A partition whose ``rel`` array was changed (its checksum updated or not)."""
        out = self.copy(name)
        f = out / rel
        np.save(f, change(np.load(f)))
        if checksum:
            self.edit_meta(out, lambda m: m["files"].__setitem__(rel, sha256_file(f)))
        return out

    @staticmethod
    def edit_meta(out: Path, change: Callable[[dict[str, Any]], None],
                  digest: bool = True) -> Path:
        meta = json.loads((out / "meta.json").read_text())
        change(meta)
        if digest:
            write_digested_json(out / "meta.json", meta)
        else:
            (out / "meta.json").write_text(json.dumps(meta))
        return out

    def write(self, name: str, text: str) -> Path:
        p = self.work / name
        p.write_text(text)
        return p


def _flip(path: Path, at: int = -5) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x20
    path.write_bytes(bytes(data))


def _nan_row(a: np.ndarray) -> np.ndarray:
    a = np.array(a)
    a[1, 1] = np.nan
    return a


def _bump_index(a: np.ndarray) -> np.ndarray:
    a = np.array(a)
    a[0] = 10**7
    return a


def cases(inp: Inputs) -> list[Case]:
    """Every case of the campaign (their files are made lazily, in ``inp.work``)."""
    train, part = _tool("gnnpar-train"), _tool("gnnpar-partition")
    edges = str(inp.edges)
    w = inp.work

    def run(*args: str, nproc: str = "1") -> Callable[[Path], list[str]]:
        return lambda out: [*train, *args, *TRAIN, "--nproc", nproc, "--root", str(w / "data"),
                            "--out", str(out)]

    def lazy(make: Callable[[], Path], *args: str, nproc: str = "2") -> Callable[[Path], list[str]]:
        return lambda out: [*train, str(make()), *TRAIN, *args, "--nproc", nproc, "--root",
                            str(w / "data"), "--out", str(out)]

    def npz(name: str, **arrays: Any) -> Callable[[], Path]:
        def make() -> Path:
            p = w / f"{name}.npz"
            np.savez(p, **arrays)
            return p
        return make

    def saved_without(name: str, drop: str) -> Callable[[], Path]:
        def make() -> Path:
            d = w / name
            shutil.copytree(inp.saved, d)
            (d / drop).unlink()
            return d
        return make

    def saved_truncated() -> Path:
        d = w / "saved-trunc"
        shutil.copytree(inp.saved, d)
        f = d / "src.npy"
        f.write_bytes(f.read_bytes()[:-100])
        return d

    ds = inp.ds
    src, dst = np.asarray(ds.src), np.asarray(ds.dst)
    x, y = np.asarray(ds.x), np.asarray(ds.y)
    out: list[Case] = [
        # ------------------------------------------------------------ dataset inputs
        Case("dataset", "missing file", run(str(w / "nope.csv"))),
        Case("dataset", "edge list with a word", lambda o: run(str(inp.write(
            "words.csv", "src,dst\n0,1\n1,two\n")), "--split", "0.6,0.2,0.2")(o)),
        Case("dataset", "edge list with a negative id", lambda o: run(str(inp.write(
            "neg.csv", "0 1\n-3 2\n")), "--split", "0.6,0.2,0.2")(o)),
        Case("dataset", "labels but no split", run(edges, "--features", str(w / "x.npy"),
                                                   "--labels", str(w / "y.csv"))),
        Case("dataset", "features with too few rows", lambda o: (np.save(
            w / "x-short.npy", x[:-5]), run(edges, "--features", str(w / "x-short.npy"),
                                            "--labels", str(w / "y.csv"), "--split",
                                            "0.6,0.2,0.2")(o))[1]),
        Case("dataset", "features with NaN", lambda o: (np.save(
            w / "x-nan.npy", _nan_row(x)), run(edges, "--features", str(w / "x-nan.npy"),
                                               "--labels", str(w / "y.csv"), "--split",
                                               "0.6,0.2,0.2")(o))[1]),
        Case("dataset", "labels not integers", lambda o: run(
            edges, "--features", str(w / "x.npy"), "--labels", str(inp.write(
                "y-bad.csv", "cat\n" * ds.num_nodes)), "--split", "0.6,0.2,0.2")(o)),
        Case("dataset", "split fractions above 1", run(
            edges, "--features", str(w / "x.npy"), "--labels", str(w / "y.csv"),
            "--split", "0.8,0.3,0.2")),
        Case("dataset", "split files missing", run(
            edges, "--features", str(w / "x.npy"), "--labels", str(w / "y.csv"),
            "--split", f"{w}/a.npy,{w}/b.npy,{w}/c.npy")),
        Case("dataset", "npz with a pickled object array", lazy(npz(
            "obj", src=src, dst=dst, x=x, y=np.array([{"a": 1}] * ds.num_nodes, dtype=object)),
            nproc="1")),
        Case("dataset", "npz with a short x", lazy(npz(
            "short", src=src, dst=dst, x=x[:-3], y=y, train_idx=np.asarray(ds.train_idx),
            val_idx=np.asarray(ds.val_idx), test_idx=np.asarray(ds.test_idx)), nproc="1")),
        Case("dataset", "npz with edge_index [3, E]", lazy(npz(
            "ei3", edge_index=np.stack([src, dst, src]), x=x, y=y), nproc="1")),
        Case("dataset", "npz with extra name arrays", lazy(npz(
            "names", src=src, dst=dst, x=x, y=y, train_idx=np.asarray(ds.train_idx),
            val_idx=np.asarray(ds.val_idx), test_idx=np.asarray(ds.test_idx),
            node_names=np.array([f"n{i}" for i in range(ds.num_nodes)])), nproc="1"),
             expect_ok=True),
        Case("dataset", "dataset dir without x.npy", lazy(saved_without("no-x", "x.npy"),
                                                          nproc="1")),
        Case("dataset", "dataset dir with a truncated src.npy", lazy(saved_truncated,
                                                                     nproc="1")),
        Case("dataset", "dataset.json not JSON", lazy(lambda: (
            shutil.copytree(inp.saved, w / "badjson"),
            (w / "badjson" / "dataset.json").write_text("{nope"), w / "badjson")[2],
            nproc="1")),
        Case("dataset", "OGB meta_dict escaping its folder", lazy(lambda: inp.write(
            "escape.json", json.dumps({"dir_path": "../../etc", "split": "random",
                                       "add_inverse_edge": "False", "binary": "False",
                                       "is hetero": "False", "num tasks": "1"})), nproc="1")),
        Case("dataset", "synthetic spec with an unknown key",
             run("synthetic:sbm?nodes=500&colour=blue")),
        Case("dataset", "synthetic spec with negative nodes", run("synthetic:sbm?nodes=-5")),
        # ------------------------------------------------------------ partition damage
        Case("partition", "flipped byte in feat.npy", lazy(lambda: (lambda d: (
            _flip(d / "part-1" / "feat.npy"), d)[1])(inp.copy("flip")))),
        Case("partition", "truncated indices.npy", lazy(lambda: (lambda d: (
            (d / "part-0" / "indices.npy").write_bytes(
                (d / "part-0" / "indices.npy").read_bytes()[:-64]), d)[1])(inp.copy("trunc")))),
        Case("partition", "meta.json edited by hand", lazy(lambda: inp.edit_meta(
            inp.copy("edited"), lambda m: m.__setitem__("num_classes", 2), digest=False))),
        Case("partition", "a checksum removed", lazy(lambda: inp.edit_meta(
            inp.copy("nochk"), lambda m: m["files"].pop("part-0/feat.npy")))),
        Case("partition", "a checksum pointing outside", lazy(lambda: inp.edit_meta(
            inp.copy("outside"), lambda m: m["files"].__setitem__(
                "part-0/../../../etc/hostname", "0" * 64)))),
        Case("partition", "num_parts a string", lazy(lambda: inp.edit_meta(
            inp.copy("strparts"), lambda m: m.__setitem__("num_parts", "2")))),
        Case("partition", "NaN feature, checksum updated", lazy(lambda: inp.part_file(
            "nanfeat", "part-0/feat.npy", _nan_row, checksum=True))),
        Case("partition", "indices as int32, checksum updated", lazy(lambda: inp.part_file(
            "int32", "part-0/indices.npy", lambda a: a.astype(np.int32), checksum=True))),
        Case("partition", "index out of range, checksum updated", lazy(lambda: inp.part_file(
            "range", "part-1/indices.npy", _bump_index, checksum=True))),
        Case("partition", "a part directory missing", lazy(lambda: (lambda d: (
            shutil.rmtree(d / "part-1"), d)[1])(inp.copy("nopart")))),
        Case("partition", "more processes than parts", lazy(lambda: inp.good, nproc="3")),
        # ------------------------------------------------------------ flags
        *[Case("flags", f"--{flag} {value}", lazy(lambda: inp.good, f"--{flag}", value))
          for flag, value in (("lr", "inf"), ("lr", "-1"), ("fanouts", "0,5"),
                              ("batch-size", "0"), ("epochs", "0"), ("model", "nope"),
                              ("timeout-s", "0"), ("device", "cuda"), ("config", str(
                                  w / "missing.toml")), ("precision", "fp8"))],
        Case("flags", "--config not TOML", lambda o: [*train, str(inp.good), "--config", str(
            inp.write("bad.toml", "[train\nlr=")), "--out", str(o)]),
        Case("flags", "an unknown flag", lazy(lambda: inp.good, "--learning-rate", "1")),
        Case("flags", "--out under a file", lambda o: [*train, str(inp.good), *TRAIN,
                                                       "--nproc", "2", "--out", str(inp.write(
                                                           "a-file", "")) + "/run"]),
        Case("flags", "--fanouts 1000000000,10 (capped at the degree)",
             lazy(lambda: inp.good, "--fanouts", "1000000000,10"), expect_ok=True),
        # ------------------------------------------------------------ output directories
        Case("output", "--overwrite of a directory that is not a partition", lambda o: (
            o.mkdir(), (o / "thesis.tex").write_text("work"),
            [*part, str(inp.saved), "--num-parts", "2", "--out", str(o), "--overwrite",
             "--no-progress"])[2]),
        Case("output", "a run directory reused without --resume", lambda o: (
            shutil.copytree(w / "done-run", o), [*train, str(inp.good), *TRAIN, "--nproc",
                                                 "2", "--out", str(o)])[1]),
    ]
    return out


def resume_cases(inp: Inputs) -> list[Case]:
    """Cases on a finished run's checkpoint (made once, copied per case)."""
    train = _tool("gnnpar-train")
    w = inp.work
    base = [*train, str(inp.good), "--hidden", "8", "--timeout-s", "30", "--nproc", "2"]

    def on(name: str, damage: Callable[[Path], None], *flags: str) -> Case:
        def argv(out: Path) -> list[str]:
            shutil.copytree(w / "done-run", out)
            damage(out)
            return [*base, "--no-progress", "--epochs", "2", *flags, "--out", str(out),
                    "--resume"]
        return Case("resume", name, argv)

    def edit_state(out: Path) -> None:
        f = out / "checkpoint" / "state.json"
        doc = json.loads(f.read_text())
        doc["world_size"] = 2 if doc["world_size"] != 2 else 3
        f.write_text(json.dumps(doc))

    return [
        on("flipped bit in tensors.bin", lambda o: _flip(o / "checkpoint" / "tensors.bin")),
        on("state.json edited", edit_state),
        on("tensors.bin missing", lambda o: (o / "checkpoint" / "tensors.bin").unlink()),
        on("--lr changed on resume", lambda o: None, "--lr", "0.5"),
        on("checkpoint missing", lambda o: shutil.rmtree(o / "checkpoint")),
        on("old DCP checkpoint with a crafted .metadata", lambda o: (
            shutil.rmtree(o / "checkpoint"), (o / "checkpoint").mkdir(),
            (o / "checkpoint" / ".metadata").write_bytes(b"\x80\x04cos\nsystem\n(S'touch "
                                                         + str(w / "pwned").encode()
                                                         + b"'\ntR."),
            (o / "checkpoint" / "state.json").write_text(json.dumps(
                {"format": "gnnpar-checkpoint", "format_version": 1, "world_size": 2,
                 "state": {}})))),
    ]


def fault_cases(inp: Inputs) -> list[Case]:
    """A rank killed or stopped mid-run, in both modes."""
    train = _tool("gnnpar-train")
    out = []
    for mode, flags in (("full", ["--mode", "full", "--model", "gcn"]),
                        ("sample", ["--mode", "sample", "--fanouts", "5,5", "--batch-size",
                                    "64"])):
        for sig in ("SIGKILL", "SIGSTOP"):
            out.append(Case("fault", f"rank 1 {sig} ({mode})", lambda o, f=flags: [
                *train, str(inp.good), *f, "--hidden", "8", "--epochs", "100000",
                "--no-progress", "--timeout-s", "5", "--nproc", "2", "--out", str(o)],
                fault=sig))
    return out


def _rank_pid(launcher: int, rank: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and int(stat[1]) == launcher:
            return int(entry.name)
    return None


def run_case(case: Case, out: Path) -> tuple[str, float, str]:
    """Run one case; its class, seconds and last error line."""
    argv = case.argv(out)
    t0 = time.monotonic()
    if case.fault is None:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        code, err = proc.returncode, proc.stderr
    else:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        try:
            record = out / "record.json"
            while p.poll() is None and not (record.is_file()
                                            and '"epoch": 1' in record.read_text()):
                time.sleep(0.1)
            victim = _rank_pid(p.pid, 1)
            if victim is not None:
                os.kill(victim, getattr(signal, case.fault))
            t0 = time.monotonic()
            _, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        code = p.returncode
    took = time.monotonic() - t0
    kind = classify(code, err, case.expect_ok)
    if case.fault is not None:
        kind = "fault survived" if kind == "clear error" else kind
    lines = [ln for ln in err.splitlines() if "error:" in ln] or err.splitlines()[-1:]
    return kind, took, (lines[0] if lines else "")[:160]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write every case's outcome here")
    ap.add_argument("--workdir", help="where the inputs are made (default: a temp dir)")
    ap.add_argument("--no-faults", action="store_true", help="skip the 4 fault cases")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gnnpar-reliability-"))
    work.mkdir(parents=True, exist_ok=True)
    inp = Inputs(work)
    done = subprocess.run([*_tool("gnnpar-train"), str(inp.good), *TRAIN, "--nproc", "2",
                           "--out", str(work / "done-run")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    todo = cases(inp) + resume_cases(inp) + ([] if args.no_faults else fault_cases(inp))
    results = []
    for i, case in enumerate(todo):
        kind, took, line = run_case(case, work / f"out-{i}")
        results.append({"group": case.group, "case": case.name, "outcome": kind,
                        "seconds": round(took, 1), "message": line})
        print(f"{case.group:<10} {case.name:<52} {kind:<18} {took:6.1f} s  {line[:90]}",
              flush=True)
    counts = Counter(r["outcome"] for r in results)
    print("\n" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    print(f"code executed by a crafted file: {'YES' if (work / 'pwned').exists() else 'no'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": counts, "cases": results,
                                               "date": time.strftime("%Y-%m-%d")}, indent=2))


if __name__ == "__main__":
    main()
