"""The shared contract's conformance cases: every surface against hostile outputs and inputs.

Every command and public function that writes or reads an artifact is registered in
:mod:`gnnpar.artifacts.registry`; here each one gets a *recipe* (a valid invocation on
small artifacts built once, :class:`Bench`) and is run against

* hostile outputs (:data:`OUTPUT_CASES`): an existing user directory or file, a symbolic
  link to a user directory, a directory holding a foreign marker (``index.json``,
  ``meta.json``, ``record.json``) or a real marker beside a user's file, a place inside
  another gnnpar artifact, a read-only directory, a small full file system, a concurrent
  writer, and a kill in the middle of the write;
* hostile inputs (:data:`INPUT_CASES`): a file truncated, bit-flipped or swapped from
  another artifact, sizes edited to ``10**13`` and NaN weights (digests rewritten to
  match), and a pickle that would leave a marker file if it were ever loaded.

:func:`check_output_case` and :func:`check_input_case` return what went wrong (an empty
list when the contract held): a traceback, more or less than one error line, a foreign
byte changed, a previous output lost or half-overwritten, a file left behind, or a
pickle executed.  ``tests/conformance`` runs every case in-process at the smallest size;
``benchmarks/bench_reliability.py --round-three`` runs them as users launch them, as
console scripts.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.artifacts.files import json_digest, sha256_file
from gnnpar.artifacts.registry import SURFACES, Surface, commands
from gnnpar.errors import GnnparError

SPEC = "synthetic:sbm?nodes=300&avg_degree=6&classes=3&feat_dim=4&seed=0"
"""The graph every case runs on: the smallest that exercises every command."""
OTHER_SPEC = "synthetic:sbm?nodes=320&avg_degree=6&classes=3&feat_dim=4&seed=1"
"""A second graph, for inputs swapped from another artifact."""
TRAIN_FLAGS = ("--epochs", "1", "--hidden", "8", "--fanouts", "4,4", "--batch-size", "64",
               "--no-progress", "--eval-every", "1")
USER_BYTES = b"years of work\n"
MARKER_NAME = "PICKLE-RAN"
"""The file a planted pickle creates if anything unpickles it."""


# --------------------------------------------------------------------------- outcomes
@dataclass
class Outcome:
    """What one invocation did.

    Attributes:
        code: Exit status (a function: 0 returned, 1 raised a gnnpar error).
        out: Its standard output.
        err: Its standard error (a function: the error's text).
        crash: The text of an exception that is not a gnnpar error (a traceback).
    """

    code: int
    out: str
    err: str
    crash: str = ""

    @property
    def error_lines(self) -> list[str]:
        """The lines that report an error."""
        return [ln for ln in self.err.splitlines() if "error:" in ln or ln.startswith(
            ("error", "gnnpar"))]

    def problems(self, expect_error: bool | None) -> list[str]:
        """What breaks the contract: a traceback, or not exactly one error line.

        Args:
            expect_error: It must refuse (``True``), succeed (``False``), or either
                (``None``), an error always in one line.
        """
        found = []
        if self.crash or "Traceback (most recent call last)" in self.err:
            found.append(f"traceback: {(self.crash or self.err)[-600:]}")
        elif expect_error and self.code == 0:
            found.append(f"accepted (exit 0): {self.out[-300:]}")
        elif expect_error is False and self.code != 0:
            found.append(f"failed (exit {self.code}): {self.err[-600:]}")
        elif self.code != 0 and len(self.error_lines) != 1:
            found.append(f"{len(self.error_lines)} error lines: {self.err[-600:]}")
        return found


def _entry(surface: Surface) -> Callable[..., Any]:
    module, _, name = surface.entry.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return]


def invoke(name: str, argv: Sequence[str], cwd: Path, *, subprocess_: bool = False,
           kill_at: int = 0, timeout: float = 600.0) -> Outcome:
    """Run command ``name`` (a registered command surface) with ``argv``.

    Args:
        name: ``gnnpar-export``, ``gnnpar-partition verify``, ...
        argv: Its arguments (a subcommand's word included).
        cwd: Working directory.
        subprocess_: In a process of its own (as users launch it), else in this one.
        kill_at: In a process of its own, SIGKILL it at its ``kill_at``-th opening of a
            temporary file for writing (0: never): a kill in the middle of a write.
        timeout: Seconds before a process of its own is killed.
    """
    surface = commands()[name]
    if not subprocess_ and not kill_at:
        out, err = io.StringIO(), io.StringIO()
        here = Path.cwd()
        try:
            os.chdir(cwd)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = _entry(surface)(list(argv))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 2
        except Exception as exc:  # noqa: BLE001 - what the contract forbids, reported
            import traceback

            return Outcome(1, out.getvalue(), err.getvalue(), traceback.format_exc()
                           if not isinstance(exc, GnnparError) else
                           f"uncaught {type(exc).__name__}: {exc}")
        finally:
            os.chdir(here)
        return Outcome(int(code or 0), out.getvalue(), err.getvalue())
    runner = _RUNNER.format(entry=surface.entry, kill_at=kill_at)
    proc = subprocess.run([sys.executable, "-c", runner, *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode == -signal.SIGKILL:
        return Outcome(-9, proc.stdout, proc.stderr)
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def call(fn: Callable[[], Any]) -> Outcome:
    """Run a public function as :func:`invoke` runs a command: its error as one line."""
    try:
        value = fn()
    except GnnparError as exc:
        return Outcome(1, "", f"error: {exc}")
    except Exception:  # noqa: BLE001 - what the contract forbids, reported
        import traceback

        return Outcome(1, "", "", traceback.format_exc())
    return Outcome(0, repr(value)[:200], "")


_RUNNER = """
import importlib, os, signal, sys
seen = [0]
def hook(event, args):
    if event == "open" and {kill_at} and isinstance(args[1], str) and \\
            any(c in args[1] for c in "wax") and ".tmp" in str(args[0]):
        seen[0] += 1
        if seen[0] >= {kill_at}:
            os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(hook)
module, _, name = "{entry}".partition(":")
sys.exit(getattr(importlib.import_module(module), name)(sys.argv[1:]))
"""


# --------------------------------------------------------------------------- snapshots
Snapshot = dict[str, Any]


def snapshot(root: Path) -> Snapshot:
    """Every entry under ``root``: file bytes' SHA-256, link targets, directories."""
    found: Snapshot = {}
    if not root.exists() and not root.is_symlink():
        return found
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                found[rel] = f"-> {os.readlink(p)}"
            elif p.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return found


def differences(before: Snapshot, after: Snapshot) -> list[str]:
    """The entries of two snapshots that differ."""
    keys = sorted(set(before) | set(after))
    return [f"{k}: {before.get(k, 'absent')} -> {after.get(k, 'absent')}"
            for k in keys if before.get(k) != after.get(k)][:8]


# --------------------------------------------------------------------------- the bench
@dataclass
class Bench:
    """Small valid artifacts of every kind, made once, copied into each case.

    Attributes:
        root: Where they lie.
        subprocess_: Run commands in processes of their own.
    """

    root: Path
    subprocess_: bool = False
    _made: dict[str, Path] = field(default_factory=dict)

    def run(self, name: str, argv: Sequence[str], **kw: Any) -> Outcome:
        """Invoke ``name`` from the bench's root."""
        return invoke(name, argv, self.root, subprocess_=self.subprocess_, **kw)

    def _make(self, key: str, build: Callable[[Path], None]) -> Path:
        if key not in self._made:
            path = self.root / key
            build(path)
            self._made[key] = path
        return self._made[key]

    def dataset(self, other: bool = False) -> Path:
        """A dataset directory (``GraphDataset.save``)."""
        def build(path: Path) -> None:
            from gnnpar.datasets.spec import load_dataset

            load_dataset(OTHER_SPEC if other else SPEC).save(path)
        return self._make("dataset-b" if other else "dataset", build)

    def partition(self, other: bool = False) -> Path:
        """A one-part partition directory."""
        def build(path: Path) -> None:
            _ok(self.run("gnnpar-partition", [OTHER_SPEC if other else SPEC, "--num-parts",
                                              "1", "--out", str(path), "--no-progress"]))
        return self._make("partition-b" if other else "partition", build)

    def run_dir(self, other: bool = False) -> Path:
        """A trained run with its checkpoint and predictions (one epoch)."""
        def build(path: Path) -> None:
            hidden = ["--hidden", "16", "--seed", "1"] if other else []
            _ok(self.run("gnnpar-train", [str(self.partition(other)), *TRAIN_FLAGS, *hidden,
                                          "--save-predictions", "--out", str(path)]))
        return self._make("run-b" if other else "run", build)

    def predictions(self, other: bool = False) -> Path:
        """A ``gnnpar-predict`` output directory."""
        def build(path: Path) -> None:
            _ok(self.run("gnnpar-predict", [str(self.run_dir(other)),
                                            str(self.partition(other)), "--out", str(path)]))
        return self._make("predictions-b" if other else "predictions", build)

    def artifact(self, kind: str, other: bool = False) -> Path:
        """The bench's artifact of ``kind`` (``run``, ``partition``, ...)."""
        return {"run": self.run_dir, "partition": self.partition, "dataset": self.dataset,
                "predictions": self.predictions}[kind](other)

    def reference(self, recipe_name: str) -> Path:
        """A complete output of ``recipe_name``, made once (what an earlier run left)."""
        recipe = RECIPES[recipe_name]
        assert recipe.output is not None

        def build(path: Path) -> None:
            path.mkdir()
            _ok(self.run(surface_of(recipe_name), recipe.argv(
                self, path / _NAMES[recipe.output or ""], inputs_for(self, recipe))))
        return self._make(f"ref-{recipe_name.replace(' ', '_')}", build)

    def put_reference(self, recipe_name: str, out: Path) -> None:
        """Copy the reference output of ``recipe_name`` (and its siblings) to ``out``.

        ``out`` has the reference's name (:data:`_NAMES`), in any directory.
        """
        out.parent.mkdir(parents=True, exist_ok=True)
        for entry in self.reference(recipe_name).iterdir():
            if entry.is_dir():
                shutil.copytree(entry, out.parent / entry.name, symlinks=True)
            else:
                shutil.copy2(entry, out.parent / entry.name)


def _ok(outcome: Outcome) -> None:
    if outcome.code != 0 or outcome.crash:
        raise RuntimeError(f"building the bench failed: {outcome.err[-2000:]}"
                           f"{outcome.crash[-2000:]}")


# --------------------------------------------------------------------------- recipes
@dataclass(frozen=True)
class Recipe:
    """A valid invocation of a command surface.

    Attributes:
        argv: ``(bench, output path or None, inputs by argument) -> argv``.
        output: The kind written (``None``: it writes nothing).
        overwrite: The flag that replaces an earlier output (``None``: none).
        inputs: Argument -> the bench artifact it reads, and the files of it that this
            command reads (what a hostile input may damage).
        harmless: Input cases this command may accept: it only shows what it reads, and
            the damaged file is still a valid one (another run's record, say).
    """

    argv: Callable[[Bench, Path | None, dict[str, Path]], list[str]]
    output: str | None = None
    overwrite: str | None = "--overwrite"
    inputs: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    harmless: tuple[str, ...] = ()


_CKPT = ("checkpoint/tensors.bin", "checkpoint/state.json")
_BEST = ("best/tensors.bin", "best/state.json")
_SWAPPED = "swapped from another artifact"
_HUGE = "sizes 10^13, digests rewritten"
_PART = ("meta.json", "part-0/feat.npy")
RECIPES: dict[str, Recipe] = {
    "gnnpar-partition": Recipe(
        lambda b, out, inp: [str(inp["DATASET"]), "--num-parts", "1", "--out", str(out),
                             "--no-progress"], "partition",
        inputs={"DATASET": ("dataset", ("dataset.json", "x.npy"))}),
    "gnnpar-partition verify": Recipe(
        lambda b, out, inp: ["verify", str(inp["DIR"])], None, None,
        inputs={"DIR": ("partition", _PART)}),
    "gnnpar-partition info": Recipe(
        lambda b, out, inp: ["info", str(inp["DIR"]), "--plot", str(out)], "picture",
        inputs={"DIR": ("partition", ("meta.json",))}, harmless=(_SWAPPED,)),
    "gnnpar-train": Recipe(
        lambda b, out, inp: [str(inp["DATASET"]), *TRAIN_FLAGS, "--out", str(out)], "run",
        inputs={"DATASET": ("partition", _PART)}),
    "gnnpar-train --resume": Recipe(
        lambda b, out, inp: ["--config", str(inp["--resume"] / "config.json"), "--resume",
                             "--epochs", "2", "--out", str(inp["--resume"])], None, None,
        inputs={"--resume": ("run", (*_CKPT, "record.json"))},
        harmless=(_SWAPPED, _HUGE)),  # the record is rewritten from the checkpoint
    "gnnpar-predict": Recipe(
        lambda b, out, inp: [str(inp["RUN_DIR"]), str(inp["DATASET"]), "--out", str(out)],
        "predictions", inputs={"RUN_DIR": ("run", (*_CKPT, "record.json")),
                               "DATASET": ("partition", _PART)}),
    "gnnpar-predict --best": Recipe(
        lambda b, out, inp: [str(inp["RUN_DIR"]), str(inp["DATASET"]), "--out", str(out),
                             "--best"],
        "predictions", inputs={"RUN_DIR": ("run", (*_BEST, "record.json")),
                               "DATASET": ("partition", _PART)}),
    "gnnpar-export": Recipe(
        lambda b, out, inp: [str(inp["RUN_DIR"]), "--out", str(out)], "export",
        inputs={"RUN_DIR": ("run", (*_CKPT, "record.json"))}),
    "gnnpar-export --best": Recipe(
        lambda b, out, inp: [str(inp["RUN_DIR"]), "--out", str(out), "--best"], "export",
        inputs={"RUN_DIR": ("run", (*_BEST, "record.json"))}),
    "gnnpar-plot": Recipe(
        lambda b, out, inp: [str(inp["RECORD"]), "--out", str(out)], "picture",
        inputs={"RECORD": ("run", ("record.json",))}, harmless=(_SWAPPED, _HUGE)),
    "gnnpar-plot --partition": Recipe(
        lambda b, out, inp: ["--partition", str(inp["--partition"]), "--out", str(out)],
        "picture", inputs={"--partition": ("partition", ("meta.json",))},
        harmless=(_SWAPPED,)),
    "python -m gnnpar.datasets": Recipe(
        lambda b, out, inp: [str(inp["DATASET"]), "--save", str(out)], "dataset",
        inputs={"DATASET": ("dataset", ("dataset.json", "x.npy"))}),
}
"""Every command surface's valid invocation (variants of one command after a space)."""


def surface_of(recipe: str) -> str:
    """The registered command a recipe runs (``gnnpar-train --resume`` -> ``gnnpar-train``)."""
    return recipe.split(" --")[0]


def inputs_for(bench: Bench, recipe: Recipe) -> dict[str, Path]:
    """The bench's valid input of every argument of ``recipe``."""
    return {arg: bench.artifact(kind) for arg, (kind, _) in recipe.inputs.items()}


# --------------------------------------------------------------------------- outputs
DIRECTORY_OUTPUTS = ("partition", "run", "predictions", "dataset")
FILE_OUTPUTS = ("export", "picture")
_NAMES = {"partition": "parts", "run": "run", "predictions": "preds", "dataset": "ds",
          "export": "model.pt", "picture": "plot.png"}
_MARKERS = {"partition": "meta.json", "run": "record.json", "predictions": "index.json",
            "dataset": "dataset.json", "export": "model.json"}


def _plant_pickle(path: Path) -> None:
    """A pickle at ``path`` that creates :data:`MARKER_NAME` beside it if unpickled."""
    target = path.parent / MARKER_NAME
    payload = pickle.dumps(_Touch(str(target)))  # noqa: S301 - the hostile input itself
    path.write_bytes(payload)


class _Touch:
    """Unpickled, it creates a file (the planted marker)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (Path.write_text, (Path(self.path), "ran"))  # type: ignore[return-value]


@dataclass(frozen=True)
class OutputCase:
    """A hostile output: what :func:`check_output_case` sets up where the output goes.

    Attributes:
        name: The case.
        kinds: The output kinds it applies to.
        expect_error: Whether the command must refuse (else: it may succeed, but never
            lose or mix anything).
    """

    name: str
    kinds: tuple[str, ...]
    expect_error: bool = True


OUTPUT_CASES = (
    OutputCase("user directory", DIRECTORY_OUTPUTS),
    OutputCase("user file", (*DIRECTORY_OUTPUTS, *FILE_OUTPUTS)),
    OutputCase("link to a user directory", (*DIRECTORY_OUTPUTS, *FILE_OUTPUTS)),
    OutputCase("foreign marker", (*DIRECTORY_OUTPUTS, "export")),
    OutputCase("real marker and a user file", DIRECTORY_OUTPUTS),
    OutputCase("user file beside", ("export",)),
    OutputCase("inside a run directory", (*DIRECTORY_OUTPUTS, *FILE_OUTPUTS)),
    OutputCase("read-only directory", (*DIRECTORY_OUTPUTS, *FILE_OUTPUTS)),
    OutputCase("full file system", (*DIRECTORY_OUTPUTS, *FILE_OUTPUTS)),
    OutputCase("concurrent writer", (*DIRECTORY_OUTPUTS, *FILE_OUTPUTS)),
    OutputCase("killed mid-write", (*DIRECTORY_OUTPUTS, *FILE_OUTPUTS), expect_error=False),
)


def _user_tree(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "thesis.tex").write_bytes(USER_BYTES)
    (root / "data").mkdir(exist_ok=True)
    (root / "data" / "keep.txt").write_bytes(USER_BYTES)


def _plant_output(case: str, kind: str, box: Path, out: Path, bench: Bench,
                  previous: Callable[[Path], None]) -> Path:
    """Set up ``case`` where ``out`` goes; the directory whose bytes must not change."""
    if case == "user directory":
        _user_tree(out)
    elif case == "user file":
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(USER_BYTES)
    elif case == "link to a user directory":
        _user_tree(box / "elsewhere")
        os.symlink(box / "elsewhere" if kind in DIRECTORY_OUTPUTS
                   else box / "elsewhere" / "thesis.tex", out)
    elif case == "foreign marker":
        marker = out / _MARKERS[kind] if kind in DIRECTORY_OUTPUTS else \
            out.with_suffix(".json")
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text('{"format": "not-gnnpar"}\n' if kind == "export" else "{}\n")
        if kind in DIRECTORY_OUTPUTS:
            (out / "rank-0").mkdir()
            (out / "rank-0" / "keep.txt").write_bytes(USER_BYTES)
        else:
            out.write_bytes(USER_BYTES)
    elif case == "real marker and a user file":
        previous(out)  # gnnpar's own output ...
        (out / "keep.txt").write_bytes(USER_BYTES)  # ... with a user's file put inside
    elif case == "user file beside":
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_bytes(USER_BYTES)
    elif case == "inside a run directory":
        run = box / "a-run"
        shutil.copytree(bench.run_dir(), run, symlinks=True)
        return run
    return box


def _inside(case: str, box: Path, kind: str) -> Path:
    name = _NAMES[kind]
    if case == "inside a run directory":
        return box / "a-run" / name
    return box / name


@contextlib.contextmanager
def small_file_system(path: Path, free: int) -> Iterator[str]:
    """``path`` on a real file system with about ``free`` bytes left; yields how.

    A tmpfs mounted there and filled to ``free`` bytes where this machine lets us mount
    one (root with the capability): ``"tmpfs"``; else ``"unavailable"`` (the writers'
    own disk-full tests, which fill the disk inside the writer, cover those machines).
    """
    path.mkdir(parents=True, exist_ok=True)
    size = max(64 << 10, free + (64 << 10))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(path)], capture_output=True).returncode == 0
    try:
        if mounted:
            filler = path / ".filler"
            stat = os.statvfs(path)
            avail = stat.f_bavail * stat.f_frsize
            with open(filler, "wb") as f:
                f.write(b"\0" * max(0, avail - free))
            yield "tmpfs"
        else:
            yield "unavailable"
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[str]:
    """``path`` (a directory) read-only, also for root: a read-only bind mount, else chmod."""
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(path), str(path)],
                             capture_output=True).returncode == 0
    if mounted:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True)
    mode = path.stat().st_mode
    if not mounted:
        path.chmod(0o555)
    try:
        probe = path / ".probe"
        try:
            probe.write_bytes(b"")
            probe.unlink()
            yield "unavailable"  # root without mounts: nothing can make it read-only
        except OSError:
            yield "mount" if mounted else "chmod"
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
        else:
            path.chmod(mode)


@contextlib.contextmanager
def lock_held(out: Path) -> Iterator[int]:
    """Another process holding ``out``'s write lock; yields its pid."""
    code = ("import sys, time; from gnnpar.artifacts.lock import lock\n"
            "with lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def check_output_case(bench: Bench, recipe_name: str, case: OutputCase, box: Path
                      ) -> list[str]:
    """Run one hostile-output case in the empty directory ``box``; what broke the contract.

    With and without the overwrite flag where the command has one.
    """
    recipe = RECIPES[recipe_name]
    assert recipe.output is not None
    kind = recipe.output
    inputs = inputs_for(bench, recipe)
    problems: list[str] = []
    name = surface_of(recipe_name)

    def argv(out: Path, overwrite: bool) -> list[str]:
        flags = [recipe.overwrite] if overwrite and recipe.overwrite else []
        return [*recipe.argv(bench, out, inputs), *flags]

    def previous(out: Path) -> None:  # a complete earlier output of gnnpar's
        bench.put_reference(recipe_name, out)

    out = _inside(case.name, box, kind)
    if case.name in ("user directory", "user file", "link to a user directory",
                     "foreign marker", "real marker and a user file", "user file beside",
                     "inside a run directory"):
        watch = _plant_output(case.name, kind, box, out, bench, previous)
        for overwrite in (False, True):
            before = snapshot(watch)
            got = bench.run(name, argv(out, overwrite))
            problems += [f"overwrite={overwrite}: {p}" for p in got.problems(True)]
            problems += [f"overwrite={overwrite}: changed {d}"
                         for d in differences(before, snapshot(watch))]
        return problems
    if case.name == "read-only directory":
        parent = box / "locked"
        parent.mkdir()
        with read_only(parent) as how:
            if how == "unavailable":
                return []  # root without mounts: reported by the caller's count
            got = bench.run(name, argv(parent / _NAMES[kind], False))
            problems += got.problems(True)
        return problems + [f"left {d}" for d in differences({}, snapshot(parent))]
    if case.name == "full file system":
        disk = box / "disk"
        previous(disk / "ref" / _NAMES[kind])
        need = sum(p.stat().st_size for p in (disk / "ref").rglob("*") if p.is_file())
        shutil.rmtree(disk / "ref")
        with small_file_system(disk, free=max(4096, need // 2)) as how:
            if how == "unavailable":
                return []
            target = disk / _NAMES[kind]
            before = snapshot(disk)
            got = bench.run(name, argv(target, False))
            problems += got.problems(True)
            if kind == "run" and _own_run(target):  # a run that failed writing is a run
                before.update({k: v for k, v in snapshot(disk).items()
                               if k.startswith(f"{target.name}/") or k == target.name})
            problems += [f"left {d}" for d in differences(before, snapshot(disk))]
        return problems
    if case.name == "concurrent writer":
        target = box / _NAMES[kind]
        with lock_held(target) as pid:
            got = bench.run(name, argv(target, False))
        problems += got.problems(True)
        if got.code != 0 and f"process {pid}" not in got.err:
            problems.append(f"the holder (pid {pid}) is not named: {got.err[-300:]}")
        if target.exists():
            problems.append(f"{target.name} was written beside the holder")
        return problems
    # killed mid-write: an earlier output stays whole (or the new one is complete)
    target = box / _NAMES[kind]
    previous(target)
    keep = snapshot(box)
    got = invoke(name, argv(target, True), bench.root, kill_at=2)
    if got.code not in (-9, 0):
        problems.append(f"the killed command failed instead: {got.err[-300:]}")
    if kind == "run":
        from gnnpar.train.rundir import settle_for_reading

        settle_for_reading(target)  # what the next command does first
    after = snapshot(box)
    if got.code == -9:  # gnnpar's lock and temporaries may stay, for the next run to clean
        changed = differences(_own(keep), _own(after))
        if changed:
            problems.append(f"a kill left the earlier output changed: {changed}")
    redo = bench.run(name, argv(target, True))
    problems += [f"the next run after the kill: {p}" for p in redo.problems(False)]
    left = [k for k in snapshot(box) if _is_temporary(k)]
    if left:
        problems.append(f"the next run left the killed one's temporaries: {left[:4]}")
    return problems


def _own_run(out: Path) -> bool:
    """Whether ``out`` is a run directory, wholly gnnpar's, with a readable record."""
    from gnnpar.artifacts.kinds import RUN
    from gnnpar.train.record import RunRecord

    try:
        RunRecord.load(out / "record.json")
        return RUN.foreign(out)[0] is None
    except (GnnparError, OSError):
        return False


def _is_temporary(rel: str) -> bool:
    """Whether an entry is a lock or temporary of gnnpar's atomic writes."""
    from gnnpar.artifacts.kinds import TEMPORARY

    name = Path(rel).name
    return name.endswith(".lock") and name.startswith(".") or any(
        TEMPORARY.match(part) for part in Path(rel).parts)


def _own(snap: Snapshot) -> Snapshot:
    """A snapshot without locks and temporaries."""
    return {k: v for k, v in snap.items() if not _is_temporary(k)}


# --------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class InputCase:
    """A hostile input: a damage done to one file of a valid artifact.

    Attributes:
        name: The case.
        damage: ``(artifact copy, file, the other artifact of the kind) -> None``.
        data_only: It damages values (arrays, tensors), not a marker document.
    """

    name: str
    damage: Callable[[Path, str, Path], None]
    data_only: bool = False


def _truncate(root: Path, rel: str, other: Path) -> None:
    p = root / rel
    p.write_bytes(p.read_bytes()[: max(1, p.stat().st_size // 2)])


def _bitflip(root: Path, rel: str, other: Path) -> None:
    p = root / rel
    data = bytearray(p.read_bytes())
    data[len(data) // 2 if not rel.endswith(".json") else data.index(b":") + 2] ^= 0x04
    p.write_bytes(bytes(data))


def _swap(root: Path, rel: str, other: Path) -> None:
    shutil.copyfile(other / rel, root / rel)


def _huge(root: Path, rel: str, other: Path) -> None:
    """Every size a marker holds set to 10**13, its digests rewritten to match."""
    marker = _marker_of(root, rel)
    doc = json.loads(marker.read_text())
    sizes = ("num_nodes", "num_classes", "feat_dim", "rows", "width", "num_edges",
             "world_size")

    def edit(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: (10**13 if k in sizes and isinstance(v, int) else edit(v))
                    for k, v in obj.items()}
        if isinstance(obj, list):
            return [edit(v) for v in obj]
        return obj
    doc = edit(doc)
    for meta in (doc.get("tensors") or {}).values():  # a checkpoint's index: shapes
        if meta.get("shape"):
            item = meta["nbytes"] // max(1, int(np.prod(meta["shape"])))
            meta["shape"][0] = 10**13
            meta["nbytes"] = int(np.prod(meta["shape"], dtype=object)) * item
    if rel.endswith(".npy"):  # the array's header too
        _rewrite_npy(root / rel, lambda a: a, shape_scale=True)
    _reseal(root, marker, doc)


def _nan(root: Path, rel: str, other: Path) -> None:
    """NaN in the floating values of ``rel``, every digest rewritten to match."""
    p = root / rel
    if rel.endswith(".npy"):
        _rewrite_npy(p, lambda a: np.full_like(a, np.nan) if a.dtype.kind == "f" else a)
    elif rel.endswith(".bin"):
        state = json.loads((p.parent / "state.json").read_text())
        data = bytearray(p.read_bytes())
        for meta in state["tensors"].values():
            if meta["dtype"] == "float32":
                nan = np.full(int(np.prod(meta["shape"])), np.nan, dtype=np.float32).tobytes()
                data[meta["offset"]:meta["offset"] + meta["nbytes"]] = nan
                break
        p.write_bytes(bytes(data))
    _reseal(root, _marker_of(root, rel), None)


def _pickle(root: Path, rel: str, other: Path) -> None:
    """The file replaced by a pickle that leaves a marker if loaded, digests rewritten."""
    p = root / rel
    if rel.endswith(".npy"):  # an object array: a pickle inside a valid .npy
        arr = np.empty(1, dtype=object)
        arr[0] = _Touch(str(p.parent / MARKER_NAME))
        with open(p, "wb") as f:
            np.save(f, arr, allow_pickle=True)  # the hostile input planted; never loaded
    else:
        _plant_pickle(p)
    if not rel.endswith(".json"):  # a marker turned into a pickle has no digest to rewrite
        _reseal(root, _marker_of(root, rel), None)


INPUT_CASES = (
    InputCase("truncated", _truncate),
    InputCase("bit-flipped", _bitflip),
    InputCase(_SWAPPED, _swap),
    InputCase(_HUGE, _huge),
    InputCase("NaN values, digests rewritten", _nan, data_only=True),
    InputCase("marker pickle", _pickle),
)


def _marker_of(root: Path, rel: str) -> Path:
    """The marker that lists ``rel`` (or ``rel`` itself when it is one)."""
    p = root / rel
    if p.name in ("meta.json", "record.json", "index.json", "dataset.json", "state.json"):
        return p
    if p.name == "tensors.bin":
        return p.parent / "state.json"
    for parent in p.parents:
        for name in ("index.json", "meta.json", "dataset.json"):
            if (parent / name).is_file():
                return parent / name
    raise ValueError(f"no marker lists {rel}")


def _rewrite_npy(p: Path, change: Callable[[np.ndarray], np.ndarray],
                 shape_scale: bool = False) -> None:
    a = np.load(p, allow_pickle=False)
    if shape_scale:  # a header claiming 10**13 rows over the same bytes
        raw = p.read_bytes()
        header_len = len(raw) - a.nbytes
        header = raw[:header_len].decode("latin1")
        header = header.replace(f"({a.shape[0]},", f"({10**13},", 1)
        pad = header_len - len(header.rstrip("\n ")) - 1
        header = header.rstrip("\n ") + " " * max(0, pad) + "\n"
        p.write_bytes(header.encode("latin1")[:header_len].ljust(header_len, b" ")
                      + raw[header_len:])
        return
    with open(p, "wb") as f:
        np.save(f, change(a), allow_pickle=False)


def _reseal(root: Path, marker: Path, doc: dict[str, Any] | None) -> None:
    """Rewrite every digest the marker holds so that the damage passes them."""
    doc = json.loads(marker.read_text()) if doc is None else doc
    base = marker.parent
    if marker.name == "state.json":
        doc["sha256"] = {"tensors.bin": sha256_file(base / "tensors.bin")}
    files = doc.get("files")
    if isinstance(files, dict):
        for rel in files:
            f = base / rel
            if not f.is_file():
                continue
            files[rel] = ({"sha256": sha256_file(f), "bytes": f.stat().st_size}
                          if isinstance(files[rel], dict) else sha256_file(f))
    for shard in doc.get("shards", []) if isinstance(doc.get("shards"), list) else []:
        for name in shard.get("files", {}) if isinstance(shard, dict) else {}:
            f = base / shard["dir"] / name
            if f.is_file():
                shard["files"][name] = {"sha256": sha256_file(f), "bytes": f.stat().st_size}
    if "digest" in doc:
        doc["digest"] = json_digest(doc)
    marker.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    if marker.name == "state.json":  # the run binds to its checkpoint through this digest
        index = base.parent / "predictions" / "index.json"
        if index.is_file():
            idx = json.loads(index.read_text())
            idx.setdefault("source", {})["checkpoint"] = doc.get("digest")
            idx["digest"] = json_digest(idx)
            index.write_text(json.dumps(idx, indent=2, sort_keys=True) + "\n")


def input_targets(recipe_name: str) -> list[tuple[str, str, str]]:
    """``(argument, artifact kind, file)`` of every file a recipe's inputs may damage."""
    recipe = RECIPES[recipe_name]
    return [(arg, kind, rel) for arg, (kind, files) in recipe.inputs.items() for rel in files]


def check_input_case(bench: Bench, recipe_name: str, arg: str, rel: str, case: InputCase,
                     box: Path) -> list[str]:
    """Run one hostile-input case in the empty directory ``box``; what broke the contract."""
    recipe = RECIPES[recipe_name]
    kind = recipe.inputs[arg][0]
    inputs = inputs_for(bench, recipe)
    copy = box / f"input-{kind}"
    shutil.copytree(inputs[arg], copy, symlinks=True)
    case.damage(copy, rel, bench.artifact(kind, other=True))
    inputs[arg] = copy
    before = snapshot(copy)
    out = box / _NAMES.get(recipe.output or "", "out")
    got = bench.run(surface_of(recipe_name), recipe.argv(bench, out, inputs))
    harmless = case.name in recipe.harmless
    problems = got.problems(None if harmless else True)
    if any(p.name == MARKER_NAME for p in box.rglob("*")):
        problems.append("the planted pickle was executed")
    if recipe.output is not None and not harmless and (out.exists() or out.is_symlink()):
        problems.append(f"{out.name} was written from a damaged input")
    if recipe_name != "gnnpar-train --resume":  # a refused resume may note its status
        problems += [f"the input changed: {d}" for d in differences(before, snapshot(copy))]
    return problems


# --------------------------------------------------------------------------- predictions
def _index(d: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((d / "index.json").read_text())
    return doc


def _write_index(d: Path, doc: dict[str, Any]) -> None:
    for shard in doc.get("shards", []) if isinstance(doc.get("shards"), list) else []:
        for name in shard.get("files", {}) if isinstance(shard, dict) else {}:
            f = d / shard["dir"] / name
            if f.is_file():
                shard["files"][name] = {"sha256": sha256_file(f), "bytes": f.stat().st_size}
    doc["digest"] = json_digest(doc)
    (d / "index.json").write_text(json.dumps(doc))


def _npy(d: Path, name: str, change: Callable[[np.ndarray], np.ndarray]) -> None:
    path = d / "rank-0" / f"{name}.npy"
    np.save(path, change(np.load(path)))


def _field(**fields: Any) -> Callable[[Path, Path], None]:
    def edit(d: Path, other: Path) -> None:
        doc = _index(d)
        for key, value in fields.items():
            if value is _DROP:
                doc.pop(key)
            elif "." in key:
                section, name, sub = key.split(".")
                doc[section][name][sub] = value
            else:
                doc[key] = value
        _write_index(d, doc)
    return edit


_DROP = object()


def _swap_shard(d: Path, other: Path) -> None:
    shutil.copyfile(other / "rank-0" / "logits.npy", d / "rank-0" / "logits.npy")
    _write_index(d, _index(d))


def _shift_ids(d: Path, other: Path) -> None:
    _npy(d, "node_ids", lambda a: a + 1)
    _write_index(d, _index(d))


def _not_argmax(d: Path, other: Path) -> None:
    _npy(d, "pred", lambda a: (a + 1) % 3)
    _write_index(d, _index(d))


def _nan_logits(d: Path, other: Path) -> None:
    _npy(d, "logits", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 5, np.nan, a))
    _write_index(d, _index(d))


def _float_ids(d: Path, other: Path) -> None:
    _npy(d, "node_ids", lambda a: a.astype(np.float64))
    _write_index(d, _index(d))


def _float16(d: Path, other: Path) -> None:
    _npy(d, "logits", lambda a: a.astype(np.float16))
    _field(**{"arrays.logits.dtype": "float16"})(d, other)


PREDICTION_EDITS: dict[str, Callable[[Path, Path], None]] = {
    "a shard swapped from another run": _swap_shard,
    "node ids shifted by one": _shift_ids,
    "pred no longer the argmax of the logits": _not_argmax,
    "NaN logits": _nan_logits,
    "logits stored as float16": _float16,
    "float node_ids.npy": _float_ids,
    "num_nodes 10^13": _field(num_nodes=10**13),
    "width 10^9": _field(**{"arrays.logits.width": 10**9}),
    "dtype V2000000000": _field(**{"arrays.logits.dtype": "V2000000000"}),
    "dtype O": _field(**{"arrays.pred.dtype": "O"}),
    "negative num_nodes": _field(num_nodes=-5),
    "non-integer num_nodes": _field(num_nodes=299.5),
    "no arrays": _field(arrays=_DROP),
    "shards: 7": _field(shards=7),
    "task 7": _field(task=7),
}
"""Edits of a predictions directory (``(copy, another run's) -> None``) that each once read
as a wrong table or raised a bare exception: every digest is rewritten to match."""



def registered_commands() -> set[str]:
    """The console scripts the installed package declares (its entry points)."""
    from importlib.metadata import entry_points

    return {ep.name for ep in entry_points(group="console_scripts")
            if ep.value.startswith("gnnpar.")}


def unregistered() -> list[str]:
    """Console scripts, and command surfaces, that lack a registry entry or a recipe."""
    names = {s.name for s in SURFACES if s.command}
    scripts = {n for n in names if not n.startswith("python ")}
    missing = sorted(registered_commands() - {n.split(" ")[0] for n in scripts})
    recipes = {surface_of(r) for r in RECIPES}
    missing += sorted(f"{n} (no recipe)" for n in names - recipes)
    return missing


