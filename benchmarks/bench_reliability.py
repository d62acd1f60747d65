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
* **warned**: exit status 0 with the expected warning (inputs that are legal but
  suspicious, such as identical validation and test edges);
* **data lost**: whatever the exit status, a directory the command must not touch
  (a dataset folder, a user's file, the previous run) changed;
* for the valid inputs among them (``expect ok``): **ok** or **failed**;
* for the faults (a rank killed or stopped once training runs): **fault survived** (one
  clear error naming the rank) with the seconds from the signal to the exit, as a
  multiple of ``--timeout-s`` for a stopped rank (the documented bound: 1.5).

It prints one line per case and the counts, the figures of issue 11's and issue 24's
campaign tables.  Issue 24's cases (``--round-two`` runs only those) are the data-loss
reproductions, edits that keep every digest valid, integers that size arrays, and the
crashes of that campaign.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import struct
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
import torch

from gnnpar.artifacts.files import sha256_file, write_digested_json
from gnnpar.config import ArgumentParser
from gnnpar.datasets.synthetic import sbm, typed
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import PartitionMeta
from gnnpar.partition.writer import partition_graph
from gnnpar.train.engine import SUMS

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
    warning: str | None = None  # expected on stderr of a successful run
    intact: Callable[[], bool] | None = None  # after the run: nothing it must keep changed
    timeout_s: float = 5.0  # --timeout-s of a fault case


def classify(code: int, err: str, expect_ok: bool, warning: str | None = None) -> str:
    """``clear error``, ``unclear``, ``accepted silently``, ``warned``, ``ok`` or ``failed``."""
    if expect_ok:
        return "ok" if code == 0 else "failed"
    if code == 0:
        return "warned" if warning is not None and warning in err else "accepted silently"
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
        partition_graph(ds, self.good, PartitionConfig(num_parts=2))
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

    def link_parts(self) -> Path:
        """A 2-part partition with link supervision (made on first use)."""
        out = self.work / "link-parts"
        if not out.exists():
            partition_graph(sbm(num_nodes=1200, avg_degree=8, num_classes=4, feat_dim=8,
                                seed=3, task="link"), out, PartitionConfig(num_parts=2),
                            task="link")
        return out

    def typed_parts(self) -> Path:
        """A 2-part typed partition (made on first use)."""
        out = self.work / "typed-parts"
        if not out.exists():
            partition_graph(typed(num_papers=500, num_authors=100, num_venues=12,
                                  num_classes=4, feat_dim=8, seed=3), out,
                            PartitionConfig(num_parts=2))
        return out

    def copy_of(self, src: Path, name: str) -> Path:
        """A fresh copy of directory ``src``, to damage."""
        return Path(shutil.copytree(src, self.work / name))


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


SAMPLE = ["--fanouts", "5,5", "--batch-size", "64"]
FAULT_MODES = {"full": ["--mode", "full", "--model", "gcn"], "sample": ["--mode", "sample",
                                                                     *SAMPLE],
               "grid": ["--mode", "full", "--model", "gcn", "--grid", "2,1,1"],
               "link": ["--task", "link", *SAMPLE],
               "typed": ["--mode", "sample", *SAMPLE]}


def fault_cases(inp: Inputs, round_two: bool = False) -> list[Case]:
    """A rank killed or stopped mid-run: both in full and sample mode (issue 11), stopped
    in every mode at ``--timeout-s 20`` (issue 24's bound)."""
    train = _tool("gnnpar-train")
    parts = {"link": inp.link_parts, "typed": inp.typed_parts}
    runs = [(m, sig, 5.0) for m in ("full", "sample") for sig in ("SIGKILL", "SIGSTOP")]
    runs = [r for r in runs if not round_two] + [(m, "SIGSTOP", 20.0) for m in FAULT_MODES]
    return [Case("fault", f"rank 1 {sig} ({mode}, --timeout-s {t:g})",
                 lambda o, m=mode, t=t: [*train, str(parts.get(m, lambda: inp.good)()),
                                         *FAULT_MODES[m], "--hidden", "8", "--epochs",
                                         "100000", "--no-progress", "--timeout-s", str(t),
                                         "--nproc", "2", "--out", str(o)],
                 fault=sig, timeout_s=t) for mode, sig, t in runs]


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(f.relative_to(d)): f.read_bytes() for f in sorted(d.rglob("*")) if f.is_file()}


def _garble(path: Path) -> None:
    """Two bytes that are not UTF-8 into a JSON file."""
    data = path.read_bytes()
    path.write_bytes(data[:10] + b"\xff\xfe" + data[12:])


def _edit_state(run: Path, change: Callable[[dict[str, Any], Path], None]) -> None:
    """Change a checkpoint's ``state.json`` (and maybe ``tensors.bin``), digests recomputed."""
    ckpt = run / "checkpoint"
    doc = json.loads((ckpt / "state.json").read_text())
    del doc["digest"]
    change(doc, ckpt / "tensors.bin")
    doc["sha256"]["tensors.bin"] = sha256_file(ckpt / "tensors.bin")
    write_digested_json(ckpt / "state.json", doc)


def _nan_weight(doc: dict[str, Any], tensors: Path) -> None:
    entry = next(m for k, m in doc["tensors"].items()
                 if m["dtype"] == "float32" and k.startswith("state/model/"))
    data = bytearray(tensors.read_bytes())
    data[entry["offset"]:entry["offset"] + 4] = struct.pack("<f", float("nan"))
    tensors.write_bytes(bytes(data))


def _mid_epoch(doc: dict[str, Any], _: Path) -> None:
    """A finished 1-epoch run's checkpoint turned into one at step 2 of epoch 2."""
    extra = doc["state"]["extra"]
    extra["position"].update(epoch=1, step=2)
    extra["config"]["train"]["epochs"] = 2
    extra["partial"] = [dict.fromkeys(SUMS, 1.0) for _ in range(doc["world_size"])]


def _ogb_link_layout(d: Path, train_pt: bytes) -> Path:
    """An OGB csv link layout whose ``train.pt`` holds ``train_pt``; its meta_dict file."""
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 50, (120, 2))
    raw, split = d / "raw", d / "split" / "time"
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    for name, rows in (("edge", pairs[:100]), ("num-node-list", [[50]]),
                       ("num-edge-list", [[100]]), ("node-feat", rng.random((50, 4)))):
        with gzip.open(raw / f"{name}.csv.gz", "wt") as f:
            f.write("".join(",".join(map(str, r)) + "\n" for r in np.asarray(rows)))
    for name, rows in (("valid", pairs[100:110]), ("test", pairs[110:])):
        torch.save({"edge": torch.from_numpy(rows),
                    "edge_neg": torch.from_numpy(rng.integers(0, 50, (10, 2)))},
                   split / f"{name}.pt")
    (split / "train.pt").write_bytes(train_pt)
    (d / "RELEASE_v1.txt").write_text("")
    meta = d.parent / f"{d.name}.json"
    meta.write_text(json.dumps({
        "dir_path": str(d), "split": "time", "add_inverse_edge": "True", "binary": "False",
        "is hetero": "False", "task type": "link prediction", "eval metric": "hits@50",
        "download_name": "unused", "version": "1", "additional node files": "None",
        "additional edge files": "None", "has_node_attr": "True", "has_edge_attr": "False"}))
    return meta


def round_two_cases(inp: Inputs) -> list[Case]:
    """Issue 24's cases: data loss, digests kept valid, sizes, crashes (module docstring)."""
    train, part = _tool("gnnpar-train"), _tool("gnnpar-partition")
    w = inp.work
    x, y = w / "x.npy", w / "y.csv"
    kept: dict[str, dict[str, bytes]] = {}

    def keep(name: str, d: Path) -> Path:
        kept[name] = _snapshot(d)
        return d

    def unchanged(name: str, d: Path) -> Callable[[], bool]:
        return lambda: _snapshot(d) == kept[name]

    def train_on(parts: Path | Callable[[], Path], *flags: str) -> Callable[[Path], list[str]]:
        return lambda o: [*train, str(parts() if callable(parts) else parts), *TRAIN, *flags,
                          "--nproc", "2", "--root", str(w / "data"), "--out", str(o)]

    def resume(name: str, change: Callable[[dict[str, Any], Path], None] | None,
               *flags: str, parts: Callable[[], Path] | None = None) -> Case:
        def argv(o: Path) -> list[str]:
            shutil.copytree(w / "done-run", o)
            if change is not None:
                _edit_state(o, change)
            return [*train, str(parts() if parts else inp.good), "--hidden", "8",
                    "--timeout-s", "30", "--nproc", "2", "--no-progress", *flags, "--out",
                    str(o), "--resume"]
        return Case("resume", name, argv)

    def replaced_partition(o: Path) -> list[str]:
        """A run trained on a partition, then another partition written at its path."""
        parts = inp.copy_of(inp.good, "replaced-parts")
        subprocess.run([*train, str(parts), *TRAIN, "--nproc", "2", "--out", str(o)],
                       capture_output=True, check=True)
        partition_graph(inp.ds, parts, PartitionConfig(num_parts=2, seed=9), overwrite=True)
        return [*train, str(parts), "--hidden", "8", "--timeout-s", "30", "--nproc", "2",
                "--no-progress", "--epochs", "2", "--out", str(o), "--resume"]

    def typed_edit(name: str, change: Callable[[Path], None]) -> Callable[[], Path]:
        def make() -> Path:
            out = inp.copy_of(inp.typed_parts(), name)
            change(out)
            return out
        return make

    def offsets_off(out: Path) -> None:
        inp.edit_meta(out, lambda m: m["hetero"]["node_offsets"].__setitem__(
            1, m["hetero"]["node_offsets"][1] + 5))

    def train_other_type(out: Path) -> None:
        meta = PartitionMeta.load(out)
        assert meta.types is not None
        lay = meta.types.layout
        other = int(meta.types.part_bounds(0)[lay.type_index(lay.target) + 1])
        f = out / "part-0" / "train_idx.npy"
        np.save(f, np.append(np.load(f), other))
        inp.edit_meta(out, lambda m: m["files"].__setitem__("part-0/train_idx.npy",
                                                            sha256_file(f)))

    def repeat_first(a: np.ndarray) -> np.ndarray:
        a = np.array(a)
        a[1] = a[0]
        return a

    def saved_edit(name: str, change: Callable[[Path], None]) -> Callable[[], Path]:
        def make() -> Path:
            d = inp.copy_of(inp.saved, name)
            change(d / "dataset.json")
            return d
        return make

    def text_nodes(meta: Path) -> None:
        doc = json.loads(meta.read_text())
        doc["num_nodes"] = "1200 nodes"
        meta.write_text(json.dumps(doc))

    ogb_dir = w / "ogb-victim"
    ogb_meta = ogb_dir / "meta.json"
    mine = w / "parts-with-notes"
    old_run = w / "old-run"
    link = sbm(num_nodes=600, avg_degree=6, num_classes=3, feat_dim=4, seed=0, task="link")
    return [
        # ---------------------------------------------------------------- data loss
        Case("output", "partition --overwrite onto a dataset folder with a meta.json",
             lambda o: (ogb_dir.mkdir(), ogb_meta.write_text('{"num tasks": 1}'),
                        (ogb_dir / "edges.csv").write_text("0,1\n"), keep("ogb", ogb_dir),
                        [*part, str(inp.saved), "--num-parts", "2", "--out", str(ogb_dir),
                         "--overwrite", "--no-progress"])[-1],
             intact=lambda: _snapshot(ogb_dir) == kept["ogb"]),
        Case("output", "partition --overwrite of a partition holding a user's file",
             lambda o: (inp.copy_of(inp.good, mine.name),
                        (mine / "part-1" / "notes.txt").write_text("mine"), keep("mine", mine),
                        [*part, str(inp.saved), "--num-parts", "2", "--out", str(mine),
                         "--overwrite", "--no-progress"])[-1],
             intact=lambda: _snapshot(mine) == kept["mine"]),
        Case("output", "train --overwrite whose new run fails before its first checkpoint",
             lambda o: (inp.copy_of(w / "done-run", old_run.name), keep("run", old_run),
                        train_on(lambda: (lambda d: (_flip(d / "part-1" / "feat.npy"), d)[1])(
                            inp.copy("flip-2")), "--overwrite")(old_run))[-1],
             intact=lambda: _snapshot(old_run) == kept["run"]),
        # ------------------------------------------- silent before: digests kept valid
        resume("NaN weight in tensors.bin, digests updated", _nan_weight, "--epochs", "2"),
        resume("position past the run (epoch 100 of 1)", lambda d, _: d["state"]["extra"][
            "position"].update(epoch=100), "--epochs", "200"),
        resume("--epochs 1 below a checkpoint at step 2 of epoch 2", _mid_epoch, "--epochs",
               "1"),
        Case("resume", "another partition written at the checkpointed path",
             replaced_partition),
        Case("partition", "typed hetero.node_offsets shifted, digest updated", train_on(
            typed_edit("typed-offsets", offsets_off), *FAULT_MODES["typed"])),
        Case("partition", "typed train ids of another type, checksum updated", train_on(
            typed_edit("typed-train", train_other_type), *FAULT_MODES["typed"])),
        Case("partition", "a repeated e_id, checksum updated", train_on(
            lambda: inp.part_file("eid-rep", "part-0/e_id.npy", repeat_first, checksum=True))),
        Case("dataset", "an empty edge list with 1200 feature rows", lambda o: train_on(
            inp.write("empty.csv", "src,dst\n"), "--features", str(x), "--labels", str(y),
            "--split", "0.6,0.2,0.2")(o)),
        Case("dataset", "identical validation and test edges (a warning)", lambda o: (
            np.savez(w / "same-val-test.npz", src=link.src, dst=link.dst, x=link.x,
                     train_edges=link.train_edges, val_edges=link.val_edges,
                     test_edges=link.val_edges, val_neg=link.val_neg, test_neg=link.val_neg),
            [*part, str(w / "same-val-test.npz"), "--task", "link", "--num-parts", "2",
             "--out", str(o), "--no-progress"])[1],
             warning="validation and test supervision edges are the same"),
        # ------------------------------------------------------- crashes before
        Case("dataset", "non-UTF-8 bytes in meta.json", train_on(lambda: (lambda d: (
            _garble(d / "meta.json"), d)[1])(inp.copy("garbled-meta")))),
        Case("dataset", "non-UTF-8 bytes in dataset.json", train_on(saved_edit(
            "garbled-dataset", _garble))),
        Case("resume", "non-UTF-8 bytes in state.json", lambda o: (
            shutil.copytree(w / "done-run", o), _garble(o / "checkpoint" / "state.json"),
            [*train, str(inp.good), "--hidden", "8", "--nproc", "2", "--no-progress",
             "--epochs", "2", "--out", str(o), "--resume"])[-1]),
        Case("dataset", "a class label of 1e9 in a labels CSV", lambda o: train_on(
            inp.edges, "--features", str(x), "--labels", str(inp.write(
                "y-big.csv", "1000000000\n" + y.read_text().split("\n", 1)[1])),
            "--split", "0.6,0.2,0.2")(o)),
        Case("dataset", "a node id of 1e12 in an edge list", lambda o: train_on(inp.write(
            "edges-big.csv", inp.edges.read_text() + "5,1000000000000\n"),
            "--split", "0.6,0.2,0.2")(o)),
        Case("flags", "--hidden 10000000 (3 layers)", train_on(
            inp.good, "--hidden", "10000000", "--layers", "3", "--fanouts", "5,5,5")),
        Case("dataset", "non-integer num_nodes in dataset.json", train_on(saved_edit(
            "text-nodes", text_nodes))),
        Case("flags", "--root not writable", lambda o: [
            *train, "synthetic:sbm?nodes=500", *TRAIN, "--nproc", "2", "--root",
            str(inp.write("root-file", "")) + "/data", "--out", str(o)]),
        Case("dataset", "a pickle payload in an OGB .pt split file", train_on(
            lambda: _ogb_link_layout(w / "ogb-pickle", b"\x80\x04cposix\nsystem\n(S'touch "
                                     + str(w / "pwned").encode() + b"'\ntR."),
            "--task", "link")),
        Case("example", "dnn_hybrid_parallel --dp 1 --tp 2 --pp 2 on 4 ranks", lambda o: [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            "4", str(Path(__file__).parent.parent / "examples" / "dnn_hybrid_parallel.py"),
            "--dp", "1", "--tp", "2", "--pp", "2", "--out", str(o)], expect_ok=True),
    ]


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
    """Run one case; its class, seconds and last error line (for a hang: the seconds
    from the signal to the exit, and their multiple of ``--timeout-s``)."""
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
    kind = classify(code, err, case.expect_ok, case.warning)
    if case.fault is not None:
        kind = "fault survived" if kind == "clear error" else kind
    if case.intact is not None and not case.intact():
        kind = "data lost"
    lines = [ln for ln in err.splitlines() if "error:" in ln] or err.splitlines()[-1:]
    line = (lines[0] if lines else "")[:160]
    if case.fault == "SIGSTOP":
        line = f"[{took / case.timeout_s:.2f} x --timeout-s] {line}"
    return kind, took, line


# ----------------------------------------------------------------------------- round three
TAKEAWAY = ("gnnpar-predict", "gnnpar-export", "gnnpar-plot", "gnnpar-partition info")
"""The take-away commands: every hostile output and input of the contract, as users run them."""


def _verdict(problems: list[str], code: int | None = None) -> str:
    """How a round-three case ended (``contract held``, or what broke it)."""
    if not problems:
        return "contract held"
    text = problems[0]
    for key, kind in (("traceback", "unclear (traceback)"), ("error lines", "unclear"),
                      ("accepted", "accepted silently"), ("pickle", "code executed"),
                      ("changed", "data lost"), ("lost", "data lost"), ("left", "left files"),
                      ("written", "written from bad input")):
        if key in text:
            return kind
    return "other"


def _repro(work: Path, bench: Any) -> list[tuple[str, Callable[[Path], list[str]]]]:
    """Issue 32's reproductions, each ``(name, run in an empty directory -> problems)``."""
    from gnnpar.testing import conformance as c

    run_dir, part = bench.run_dir(), bench.partition()

    def cmd(name: str, *argv: str, cwd: Path | None = None) -> c.Outcome:
        return c.invoke(name, list(argv), cwd or work, subprocess_=True)

    def copy_run(box: Path) -> Path:
        shutil.copytree(run_dir, box / "run")
        return box / "run"

    def export_over_record(box: Path) -> list[str]:
        run = copy_run(box)
        keep = c.snapshot(run)
        got = cmd("gnnpar-export", str(run), "--out", str(run / "record.pt"))
        return got.problems(True) + [f"changed {d}" for d in c.differences(
            keep, c.snapshot(run))]

    def predict_into_a_foreign_index(box: Path) -> list[str]:
        w = box / "w"
        (w / "rank-0").mkdir(parents=True)
        (w / "index.json").write_text("{}")
        (w / "rank-0" / "keep.txt").write_text("keep")
        keep = c.snapshot(w)
        problems = []
        for flags in ([], ["--overwrite"]):
            got = cmd("gnnpar-predict", str(run_dir), c.SPEC, "--out", str(w), *flags,
                      cwd=box)
            problems += got.problems(True)
        return problems + [f"changed {d}" for d in c.differences(keep, c.snapshot(w))]

    def predict_over_a_runs_predictions(box: Path) -> list[str]:
        run = copy_run(box)
        keep = c.snapshot(run)
        got = cmd("gnnpar-predict", str(run), str(bench.partition(other=True)), "--out",
                  str(run / "predictions"), "--overwrite")
        return got.problems(True) + [f"changed {d}" for d in c.differences(
            keep, c.snapshot(run))]

    def train_overwrite_with_a_users_file(box: Path) -> list[str]:
        run = copy_run(box)
        (run / "predictions" / "keep.txt").write_text("mine")
        keep = c.snapshot(run)
        got = cmd("gnnpar-train", str(part), *c.TRAIN_FLAGS, "--out", str(run),
                  "--overwrite")
        return got.problems(True) + [f"changed {d}" for d in c.differences(
            keep, c.snapshot(run))]

    def nan_model(command: str) -> Callable[[Path], list[str]]:
        def case(box: Path) -> list[str]:
            run = copy_run(box)
            c.INPUT_CASES[4].damage(run, "checkpoint/tensors.bin", run_dir)  # NaN, resealed
            argv = [str(run), "--out", str(box / "model.pt")] if command == "gnnpar-export" \
                else [str(run), str(part), "--out", str(box / "preds")]
            got = cmd(command, *argv)
            made = [p.name for p in box.iterdir() if p.name != "run"]
            return got.problems(True) + [f"written {m}" for m in made]
        return case

    def load(preds: Path) -> c.Outcome:
        proc = subprocess.run([sys.executable, "-c", "import sys, gnnpar\ntry:\n"
                               "    gnnpar.load_predictions(sys.argv[1])\n"
                               "except gnnpar.GnnparError as e:\n"
                               "    print('error:', e, file=sys.stderr); sys.exit(1)",
                               str(preds)], capture_output=True, text=True)
        return c.Outcome(proc.returncode, proc.stdout, proc.stderr)

    def edit(name: str) -> Callable[[Path], list[str]]:
        def case(box: Path) -> list[str]:
            d = box / "preds"
            shutil.copytree(bench.predictions(), d)
            c.PREDICTION_EDITS[name](d, bench.predictions(other=True))
            return load(d).problems(True)
        return case

    def two_trainings_into_one_out(box: Path) -> list[str]:
        argv = [*_tool("gnnpar-train"), str(part), *c.TRAIN_FLAGS, "--epochs", "3",
                "--out", str(box / "run")]
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        ends = [(p.wait(timeout=600), p.stderr.read() if p.stderr else "") for p in procs]
        codes = sorted(code for code, _ in ends)
        loser = next((err for code, err in ends if code == 1), "")
        if codes != [0, 1]:
            return [f"accepted both or neither: exit {codes}"]
        if "is writing this run directory right now: process" not in loser and \
                "already holds a run" not in loser:
            return [f"the second writer is not told who holds it: {loser[-200:]}"]
        return []

    def stale_after_resume(box: Path) -> list[str]:
        run = copy_run(box)
        got = cmd("gnnpar-train", "--config", str(run / "config.json"), "--resume",
                  "--epochs", "2", "--out", str(run), "--no-save-predictions")
        out = load(run)
        return got.problems(False) + (out.problems(True) if "stale" in out.err
                                      else [f"accepted stale predictions: {out.err}"])

    def killed_overwrite_then_read(box: Path) -> list[str]:
        run = copy_run(box)
        keep = c.snapshot(run)
        killed = c.invoke("gnnpar-train", [str(part), *c.TRAIN_FLAGS, "--out", str(run),
                                           "--overwrite"], work, kill_at=1)
        problems = [] if killed.code == -9 else [f"not killed: {killed.err[-200:]}"]
        problems += load(run).problems(False)
        problems += cmd("gnnpar-export", str(run), "--out", str(box / "m.pt")).problems(False)
        after = {k: v for k, v in c.snapshot(run).items() if not k.startswith("predictions/")
                 or k in keep}
        return problems + [f"lost {d}" for d in c.differences(keep, after)]

    def empty_ogb_split(box: Path) -> list[str]:
        d = box / "tiny"
        raw = d / "raw"
        raw.mkdir(parents=True)
        rows = {"edge": ["0,1", "1,2", "2,0"], "num-node-list": ["3"],
                "num-edge-list": ["3"], "node-feat": ["0.1,0.2"] * 3,
                "node-label": ["0", "1", "0"]}
        for name, lines in rows.items():
            with gzip.open(raw / f"{name}.csv.gz", "wt") as f:
                f.write("\n".join(lines) + "\n")
        split = d / "split" / "random"
        split.mkdir(parents=True)
        for name, ids in (("train", []), ("valid", ["1"]), ("test", ["2"])):
            with gzip.open(split / f"{name}.csv.gz", "wt") as f:
                f.write("".join(f"{i}\n" for i in ids))
        meta = box / "tiny.json"
        meta.write_text(json.dumps({"dir_path": "tiny", "split": "random", "num tasks": "1",
                                    "num classes": "2", "add_inverse_edge": "False",
                                    "binary": "False", "is hetero": "False"}))
        return cmd("gnnpar-partition", str(meta), "--num-parts", "1", "--out",
                   str(box / "p"), "--no-progress").problems(True)

    def non_utf8_csv(box: Path) -> list[str]:
        (box / "e.csv").write_bytes(b"0,1\n1,2\n2,\xff\xfe3\n")
        return cmd("gnnpar-partition", str(box / "e.csv"), "--num-parts", "1", "--out",
                   str(box / "p"), "--no-progress").problems(True)

    return [("export over the run's own record.json", export_over_record),
            ("predict into a folder with a foreign index.json", predict_into_a_foreign_index),
            ("predict over a run's own predictions", predict_over_a_runs_predictions),
            ("train --overwrite with a user's file in predictions",
             train_overwrite_with_a_users_file),
            ("export a NaN model (digests rewritten)", nan_model("gnnpar-export")),
            ("predict with a NaN model (digests rewritten)", nan_model("gnnpar-predict")),
            *((f"load_predictions: {name}", edit(name)) for name in c.PREDICTION_EDITS),
            ("two gnnpar-train into one --out at once", two_trainings_into_one_out),
            ("resume without --save-predictions: stale ones refused", stale_after_resume),
            ("kill -9 under --overwrite, then read the run", killed_overwrite_then_read),
            ("an empty OGB split file", empty_ogb_split),
            ("an edge list with bytes 0xff 0xfe", non_utf8_csv)]


def round_three(work: Path) -> list[dict[str, Any]]:
    """Issue 32's campaign: the take-away surfaces and the artifact layer, as users run them.

    Every hostile output and input of :mod:`gnnpar.testing.conformance` against the
    take-away commands (:data:`TAKEAWAY`), each command in a process of its own, then the
    issue's reproductions.  Returns one row per case.
    """
    from gnnpar.testing import conformance as c

    bench = c.Bench(work / "bench", subprocess_=True)
    (work / "bench").mkdir(parents=True, exist_ok=True)
    jobs: list[tuple[str, str, Callable[[Path], list[str]]]] = []
    for recipe in TAKEAWAY:
        kind = c.RECIPES[recipe].output
        jobs += [(recipe, f"output: {case.name}", lambda box, r=recipe, k=case:
                  c.check_output_case(bench, r, k, box))
                 for case in c.OUTPUT_CASES if kind in case.kinds]
        jobs += [(recipe, f"input {rel}: {case.name}",
                  lambda box, r=recipe, a=arg, f=rel, k=case:
                  c.check_input_case(bench, r, a, f, k, box))
                 for arg, _, rel in c.input_targets(recipe) for case in c.INPUT_CASES
                 if not (case.data_only and rel.endswith(".json"))]
    jobs += [("reproduction", name, fn) for name, fn in _repro(work, bench)]
    rows = []
    for i, (group, name, fn) in enumerate(jobs):
        box = work / f"case-{i}"
        box.mkdir()
        t0 = time.monotonic()
        try:
            problems = fn(box)
        except Exception as exc:  # noqa: BLE001 - a broken case is reported, not fatal
            problems = [f"the case itself failed: {type(exc).__name__}: {exc}"]
        took = time.monotonic() - t0
        verdict = _verdict(problems)
        rows.append({"group": group, "case": name, "outcome": verdict,
                     "seconds": round(took, 1), "message": (problems or [""])[0][:300]})
        print(f"{group:<22} {name:<58} {verdict:<22} {took:5.1f} s  "
              f"{(problems or [''])[0][:90]}", flush=True)
    return rows


def main() -> None:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write every case's outcome here")
    ap.add_argument("--workdir", help="where the inputs are made (default: a temp dir)")
    ap.add_argument("--no-faults", action="store_true", help="skip the fault cases")
    ap.add_argument("--round-two", action="store_true",
                    help="only issue 24's cases (and its faults: a rank stopped in each mode)")
    ap.add_argument("--round-three", action="store_true",
                    help="only issue 32's campaign: the take-away commands and the artifact "
                    "layer against every hostile output and input, and its reproductions")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gnnpar-reliability-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.round_three:
        load = os.getloadavg()[0]
        rows = round_three(work)
        counts = Counter(r["outcome"] for r in rows)
        print(f"\n{len(rows)} cases: " + ", ".join(f"{k}: {v}" for k, v in
                                                  sorted(counts.items())))
        print(f"machine load: {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
              f"on {os.cpu_count()} cores")
        if args.json:
            Path(args.json).write_text(json.dumps({"counts": counts, "cases": rows,
                                                   "date": time.strftime("%Y-%m-%d")},
                                                  indent=2))
        return
    inp = Inputs(work)
    done = subprocess.run([*_tool("gnnpar-train"), str(inp.good), *TRAIN, "--nproc", "2",
                           "--out", str(work / "done-run")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    todo = ([] if args.round_two else cases(inp) + resume_cases(inp)) + \
        round_two_cases(inp) + ([] if args.no_faults else fault_cases(inp, args.round_two))
    results = []
    for i, case in enumerate(todo):
        kind, took, line = run_case(case, work / f"out-{i}")
        results.append({"group": case.group, "case": case.name, "outcome": kind,
                        "seconds": round(took, 1), "message": line})
        print(f"{case.group:<10} {case.name:<60} {kind:<18} {took:6.1f} s  {line[:110]}",
              flush=True)
    counts = Counter(r["outcome"] for r in results)
    print("\n" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    print(f"machine load at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"code executed by a crafted file: {'YES' if (work / 'pwned').exists() else 'no'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": counts, "cases": results,
                                               "date": time.strftime("%Y-%m-%d")}, indent=2))


if __name__ == "__main__":
    main()
