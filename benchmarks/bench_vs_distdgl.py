r"""``python benchmarks/bench_vs_distdgl.py --graph sbm,rmat,debian --json OUT``: vs DistDGL.

DistDGL 2.1.0 and gnnpar train side by side on one graph, interleaved, in one run. Run it
as root (each simulated DistDGL machine needs ``unshare -m``), from gnnpar's venv::

    python benchmarks/bench_vs_distdgl.py --graph both --json /work/bench-distdgl/both.json
    python benchmarks/bench_vs_distdgl.py --small                # 20k nodes, quick try
    python benchmarks/bench_vs_distdgl.py [--graph sbm,rmat,debian,pyimports] [--repeats 9] \
        [--epochs 3] [--max-load 1.5] [--workdir /work/bench-distdgl] \
        [--dgl-venv /work/.distdgl-venv] [--gnnpar-bin DIR] [--json OUT]

What it does:

1. Builds DistDGL's environment from PyPI in a virtual environment of its own (default
   ``/work/.distdgl-venv``; reused while ``import dgl, dgl.distributed`` works there):
   ``torch==2.2.1 numpy<2 dgl==2.1.0 torchdata==0.7.1`` and pandas, pydantic, pyyaml,
   scipy, psutil (about 2.5 GB of wheels; DGL's wheels do not support gnnpar's torch).
2. Makes each graph once with gnnpar's generators (``sbm`` and/or ``rmat``: 100k nodes,
   average degree 10, i.e. 1M directed edges, 100 features, 16 classes, homophily 0.3),
   makes it undirected with ``GraphDataset.to_undirected()`` and saves it with
   ``GraphDataset.save``; both systems read that one directory of ``.npy`` files.
3. Partitions it into 2 parts with METIS for each system: ``gnnpar-partition`` (for the
   run's fan-outs and batch size: ``--work-fanouts``, ``--work-batch-size``) and, in a
   subprocess of the DGL venv, ``dgl.distributed.partition_graph(..., part_method="metis",
   balance_ntypes=train_mask, balance_edges=True)`` (``benchmarks/_distdgl_worker.py``).
   Graphs and partitions are cached under the work directory.
4. Runs, interleaved A, B, A, B, ... (``--repeats`` each):

   * A, DistDGL: 2 simulated machines on this host, each one server and one trainer, each
     machine in its own mount namespace with a private ``/dev/shm`` (DistDGL names its
     shared memory by graph name only). The server runs as ``unshare -m --propagation
     private sh -c 'mount -t tmpfs tmpfs /dev/shm && exec python _distdgl_worker.py
     serve'``; the machine's trainer is started in that namespace (``nsenter -t SERVER_PID
     -m``) the way DGL's ``tools/launch.py`` starts trainers: ``python -m
     torch.distributed.run --nproc_per_node=1 --nnodes=2 --node_rank=M --master_addr=...``
     (so each trainer leads a session of its own, as users' trainers do), running a loop
     that is DGL's ``examples/distributed/graphsage/node_classification.py``'s. Both get
     the variables ``tools/launch.py`` sets (``DGL_ROLE``, ``DGL_SERVER_ID``,
     ``DGL_NUM_SERVER=1``, ``DGL_NUM_CLIENT=2``, ``DGL_NUM_SAMPLER=0``, ``DGL_CONF_PATH``,
     ``DGL_IP_CONFIG``, ``DGL_GRAPH_FORMAT=csc``, ``DGL_DIST_MODE=distributed``,
     ``DGL_GROUP_ID=0``, ``OMP_NUM_THREADS=1``); the ip_config puts machine 0 on
     ``127.0.0.1`` and machine 1 on ``127.0.0.2``, each with its own port; torchrun's store
     and gloo listen on loopback.
   * B, gnnpar: ``gnnpar-train PART_DIR --nproc 2 --model sage --hidden 256 --layers 2
     --fanouts 15,10 --batch-size 1024 --epochs E --lr 0.003 --dropout 0.5 --threads 1
     --eval-every E --out RUN_DIR --no-progress``.

   Same hyper-parameters on both sides: GraphSAGE (mean), 2 layers, hidden 256, dropout
   0.5, Adam lr 0.003, batch 1024 seeds per trainer, 2 trainers, 1 torch thread each,
   sampling in the trainer process, repeat ``r`` seeded ``seed + r``. Fan-outs: gnnpar
   lists them from the seeds outwards (``15,10``: 15 neighbours of each seed, then 10 of
   each of those); DGL lists them per layer from the input layer and samples them in
   reverse (``reversed(self.fanouts)`` in ``dgl/dataloading/neighbor_sampler.py``), so the
   same sampling is DGL's ``MultiLayerNeighborSampler([10, 15])``.

Rounds: round ``r`` runs A then B when ``r`` is even, B then A when odd; one run at a
time, the load average logged before each. What is measured, per run: every epoch's time
(DistDGL: the mean over its trainers of each one's epoch, as DGL's example times it;
gnnpar: its run record's ``epoch_time_s``); the CPU seconds of each trainer's training
steps per epoch (``rank_time_s``; the first epoch of each run is warm-up and dropped); CPU
seconds (user + system) of every process of the system over the whole run, from
``os.wait4`` (children included, so torchrun and gnnpar's launcher count their workers
and DistDGL's servers count); peak RSS per process (``ru_maxrss``; for gnnpar the maximum
over its process tree, per role from ``/proc/PID/status`` ``VmHWM`` sampled every
0.25 s); test accuracy on sampled neighbourhoods (same fan-outs) and with full
neighbourhoods. Reported: each system's medians, and B/A as the median (and range) of the
per-round ratios of epoch time, CPU per steady epoch, whole-run CPU, wall time and peak
RSS. Graphs: ``sbm`` and ``rmat`` (generated) and the real ``debian`` and ``pyimports``
graphs of ``real_graphs.py``. The issue's goals: gnnpar epoch <= 0.7x DistDGL, CPU
<= 0.8x, peak memory <= 1x, accuracy not lower, each rank's CPU within 1.02 of the mean.
This script only measures and reports; it is never run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnpar.config import ArgumentParser
from gnnpar.testing.procs import descendants

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_distdgl_worker.py"
DGL_REQUIREMENTS = ["torch==2.2.1", "numpy<2", "dgl==2.1.0", "torchdata==0.7.1", "pandas",
                    "pydantic", "pyyaml", "scipy", "psutil"]
DGL_CHECK = ("import os; os.environ.setdefault('DGLBACKEND', 'pytorch'); import dgl, "
             "dgl.distributed, torch, numpy; print(dgl.__version__, torch.__version__, "
             "numpy.__version__)")
GOALS = {"epoch": 0.7, "cpu": 0.8, "acc_points": 0.5}
POLL_S = 0.25
GENERATED = ("sbm", "rmat")
REAL_GRAPHS = ("debian", "pyimports")
"""Graphs built from this machine's package indices and modules (``real_graphs.py``)."""
TRAINERS_PER_MACHINE = 1
"""Trainers per simulated DistDGL machine (``torchrun --nproc_per_node``): 2 machines x 1."""


class BenchError(RuntimeError):
    """A step failed; the message says what to do."""


# ----------------------------------------------------------------- gnnpar run record adapter
# The only place that knows where gnnpar-train writes its run record and how it is laid out.
def gnnpar_record(run_dir: Path) -> dict[str, Any]:
    """The run record that ``gnnpar-train --out RUN_DIR`` wrote (``RUN_DIR/record.json``)."""
    path = run_dir / "record.json"
    if not path.is_file():
        raise BenchError(f"gnnpar-train finished without {path}; see its log beside "
                         f"{run_dir}, and update gnnpar_record() if the record moved.")
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def gnnpar_partition_quality(part_dir: Path) -> dict[str, Any]:
    """Edge cut, replication and balance from a gnnpar partition's ``meta.json`` (or {})."""
    quality: dict[str, Any] = json.loads((part_dir / "meta.json").read_text()).get(
        "quality", {})
    return quality


def gnnpar_epoch_times(record: dict[str, Any]) -> list[float]:
    """Seconds of every epoch of a gnnpar run record, in order."""
    return [float(e["epoch_time_s"]) for e in record["epochs"]]


def gnnpar_phases(record: dict[str, Any]) -> list[dict[str, float] | None]:
    """Seconds per rank of every epoch by phase (sample, fetch, wait, forward, ...)."""
    return [e.get("step_time_s") for e in record["epochs"]]


def gnnpar_rank_cpu(record: dict[str, Any]) -> list[list[float]]:
    """CPU seconds of each rank's training steps in every epoch (``[epoch][rank]``)."""
    return [[float(c) for c in e["rank_time_s"]["cpu"]] for e in record["epochs"]]


def gnnpar_sampled_edges(record: dict[str, Any]) -> list[int | None]:
    """Edges sampled in every epoch by all ranks (None where the record has no count)."""
    return [e.get("sampled_edges") for e in record["epochs"]]


def gnnpar_test_acc(record: dict[str, Any]) -> float:
    """Test accuracy on sampled neighbourhoods (after the last epoch)."""
    s = record["summary"]
    return float(s["test_acc_sampled"] if "test_acc_sampled" in s else s["test_acc"])


def gnnpar_test_acc_full(record: dict[str, Any]) -> float | None:
    """Test accuracy of full-neighbour inference, when the record has it."""
    s = record["summary"]
    v = s.get("test_acc") if record.get("format_version", 1) >= 2 else s.get("test_acc_full")
    return None if v is None else float(v)


# ------------------------------------------------------------------------ process handling
@dataclass
class Proc:
    """One process started by this script and, once reaped, its resource usage.

    Attributes:
        role: What it is (``server0``, ``trainer1``, ``gnnpar-train``).
        popen: The process.
        log: Its combined stdout / stderr file.
        rc: Exit status once reaped (negative: killed by that signal).
        cpu_s: User + system CPU seconds of it and its reaped descendants.
        maxrss_bytes: ``ru_maxrss`` (the largest of it and its reaped descendants).
    """

    role: str
    popen: subprocess.Popen[bytes]
    log: Path
    rc: int | None = None
    cpu_s: float = 0.0
    maxrss_bytes: int = 0

    def poll(self) -> bool:
        """Reap it if it has exited (``os.wait4``); True once it has."""
        if self.rc is not None:
            return True
        pid, status, ru = os.wait4(self.popen.pid, os.WNOHANG)
        if pid == 0:
            return False
        self.rc = os.waitstatus_to_exitcode(status)
        self.popen.returncode = self.rc  # reaped here, not by Popen
        self.cpu_s = ru.ru_utime + ru.ru_stime
        self.maxrss_bytes = ru.ru_maxrss * 1024
        return True

    def tail(self, lines: int = 25) -> str:
        """The last lines of its log."""
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(f"    {line}" for line in text[-lines:])


@dataclass
class Group:
    """The processes of one system in one process group, killed together on exit.

    Attributes:
        name: The system.
        procs: Its processes, in start order.
        pgid: The process group (the first process's pid).
        hwm: Peak ``VmHWM`` bytes seen per pid in its processes' trees.
        cmd: The command line of each pid seen.
    """

    name: str
    procs: list[Proc] = field(default_factory=list)
    pgid: int | None = None
    hwm: dict[int, int] = field(default_factory=dict)
    cmd: dict[int, str] = field(default_factory=dict)

    def start(self, role: str, argv: Sequence[str], env: dict[str, str], log: Path,
              cwd: Path) -> Proc:
        """Start ``argv`` in this group (the first one founds it), output to ``log``."""
        with open(log, "wb") as out:
            # The first process founds a new process group (in this session, so that the
            # others may join it); killpg(pgid) then reaches every process of the system.
            pgid = 0 if self.pgid is None else self.pgid
            kwargs: dict[str, Any] = (
                {"process_group": pgid} if sys.version_info >= (3, 11)
                else {"preexec_fn": lambda: os.setpgid(0, pgid)})
            popen = subprocess.Popen(list(argv), env=env, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=cwd, **kwargs)
        if self.pgid is None:
            self.pgid = popen.pid
        proc = Proc(role, popen, log)
        self.procs.append(proc)
        return proc

    def sample(self) -> None:
        """Record ``VmHWM`` of every live process of the system (its trees in /proc)."""
        for pid, hwm, cmd in _tree_members([p.popen.pid for p in self.procs if p.rc is None]):
            self.hwm[pid] = max(self.hwm.get(pid, 0), hwm)
            self.cmd.setdefault(pid, cmd)

    def kill(self) -> None:
        """SIGKILL every process of the system and reap what this script started.

        The process group alone does not reach them all: torchrun's workers and
        gnnpar-train's ranks each lead a session of their own, so their trees are
        followed through /proc as well.
        """
        if self.pgid is None:
            return
        roots = [p.popen.pid for p in self.procs if p.rc is None]
        for pid, _, _ in list(_tree_members(roots)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 10
        for p in self.procs:
            while not p.poll() and time.monotonic() < deadline:
                time.sleep(0.05)


def _tree_members(roots: Sequence[int]) -> Iterator[tuple[int, int, str]]:
    """``(pid, VmHWM bytes, command line)`` of each live process in the trees of ``roots``."""
    for pid in [p for root in roots for p in (root, *descendants(root))]:
        try:
            hwm = 0
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace").strip()
        except (OSError, ValueError):
            continue
        yield pid, hwm, cmd


@contextmanager
def terminate_on_signal() -> Iterator[None]:
    """Turn SIGTERM / SIGHUP into SystemExit so that every ``finally`` kills its group."""
    def handler(signum: int, frame: object) -> None:
        raise SystemExit(f"bench_vs_distdgl: stopped by signal {signum}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _log_tail_text(log: Path, size: int = 65536) -> str:
    """The last ``size`` bytes of a log file ('' if unreadable)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def wait_all(group: Group, timeout_s: float, fail_marker: str | None = None) -> None:
    """Wait until every process of ``group`` has exited; raise on a failure or timeout.

    Args:
        group: The system's processes (sampled for ``VmHWM`` while they run).
        timeout_s: Give up (and raise) after this long.
        fail_marker: A process whose log shows this has failed even while it still runs
            (a DistDGL trainer that raised blocks in its atexit barrier, waiting for the
            other trainers, instead of exiting).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        group.sample()
        done = [p.poll() for p in group.procs]
        failed = [p for p in group.procs if p.rc not in (None, 0) or (
            fail_marker and p.rc is None and fail_marker in _log_tail_text(p.log))]
        if failed:
            p = failed[0]
            how = f"exited with status {p.rc}" if p.rc is not None else "failed"
            raise BenchError(f"{group.name}: {p.role} {how}; its log {p.log}:\n{p.tail()}")
        if all(done):
            return
        if time.monotonic() > deadline:
            running = ", ".join(p.role for p in group.procs if p.rc is None)
            raise BenchError(f"{group.name}: still running after {timeout_s:.0f} s ({running})"
                             f"; raise --timeout or look at the logs in "
                             f"{group.procs[0].log.parent}")
        time.sleep(POLL_S)


# --------------------------------------------------------------------------- environments
def _run(argv: Sequence[str], what: str, log: Path | None = None, **kw: Any) -> str:
    """Run a command to completion; its output, or a BenchError naming ``what`` failed."""
    res = subprocess.run(list(argv), capture_output=True, text=True, stdin=subprocess.DEVNULL,
                         **kw)
    out = res.stdout + res.stderr
    if log is not None:
        log.write_text(out)
    if res.returncode != 0:
        tail = "\n".join(f"    {line}" for line in out.splitlines()[-25:])
        raise BenchError(f"{what} failed (exit status {res.returncode}): "
                         f"{' '.join(map(str, argv))}\n{tail}")
    return res.stdout


def dgl_env_ok(venv: Path) -> str | None:
    """The DGL, torch and numpy versions of the DGL venv, or None if it does not work."""
    py = venv / "bin" / "python"
    if not py.is_file():
        return None
    res = subprocess.run([str(py), "-c", DGL_CHECK], capture_output=True, text=True,
                         cwd="/", stdin=subprocess.DEVNULL)
    return res.stdout.strip().splitlines()[-1] if res.returncode == 0 and res.stdout else None


def ensure_dgl_env(venv: Path, base_python: str, log_dir: Path) -> str:
    """Reuse the DGL venv if it works, else create it and install DGL's pins from PyPI.

    Returns:
        ``"DGL TORCH NUMPY"`` versions of the venv.
    """
    versions = dgl_env_ok(venv)
    if versions:
        print(f"DistDGL venv {venv}: reused (dgl, torch, numpy = {versions})", flush=True)
        return versions
    print(f"DistDGL venv {venv}: installing {' '.join(DGL_REQUIREMENTS)} from PyPI "
          "(about 2.5 GB; a few minutes)...", flush=True)
    if not (venv / "bin" / "pip").is_file():
        _run([base_python, "-m", "venv", str(venv)], f"creating the DGL venv {venv}",
             log_dir / "dgl-venv-create.log")
    _run([str(venv / "bin" / "pip"), "install", "--disable-pip-version-check",
          *DGL_REQUIREMENTS], f"installing DGL into {venv} (delete {venv} and rerun, or "
         "pass --dgl-venv with a working DGL 2.1 environment)", log_dir / "dgl-venv-pip.log")
    versions = dgl_env_ok(venv)
    if not versions:
        raise BenchError(f"the DGL venv {venv} was installed but `import dgl, "
                         "dgl.distributed` fails there; run "
                         f"`{venv}/bin/python -c 'import dgl.distributed'` to see why, delete "
                         f"{venv} and rerun.")
    return versions


def gnnpar_tool(bin_dir: Path, name: str) -> str:
    """Path of a gnnpar console script (``gnnpar-train``) in ``bin_dir`` or on PATH."""
    for cand in (bin_dir / name, shutil.which(name)):
        if cand and Path(cand).is_file():
            return str(cand)
    raise BenchError(f"{name} not found in {bin_dir} or on PATH; install gnnpar "
                     "(`pip install -e .` in the repository) or pass --gnnpar-bin DIR.")


def gnnpar_train_flags(train: str) -> set[str]:
    """The long options ``gnnpar-train --help`` lists (to adapt to its current CLI)."""
    out = _run([train, "--help"], "gnnpar-train --help (is gnnpar installed and importable "
               "in this environment?)")
    return {tok.strip("[],=") for tok in out.split() if tok.startswith(("--", "[--"))}


def wait_for_quiet(max_load: float | None, max_wait_s: float) -> list[float]:
    """Wait (at most ``max_wait_s``) until the 1-minute load average is below ``max_load``.

    Returns:
        The load average when the wait ended (1, 5, 15 minutes).
    """
    deadline = time.monotonic() + max_wait_s
    told = False
    while max_load is not None and os.getloadavg()[0] >= max_load:
        if time.monotonic() > deadline:
            print(f"  (load {os.getloadavg()[0]:.2f} still >= {max_load} after "
                  f"{max_wait_s:.0f} s; running anyway)", flush=True)
            break
        if not told:
            print(f"  (waiting for the load average {os.getloadavg()[0]:.2f} to drop below "
                  f"{max_load})", flush=True)
            told = True
        time.sleep(5)
    return [round(x, 2) for x in os.getloadavg()]


def free_port(host: str) -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------------- graphs
@dataclass
class Graph:
    """One benchmark graph and its partitions.

    Attributes:
        name: ``sbm`` or ``rmat``.
        root: Its cache directory.
        params: The generator's arguments.
        info: Node / edge counts and preparation timings.
    """

    name: str
    root: Path
    params: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def dataset(self) -> Path:
        """The ``GraphDataset.save`` directory."""
        return self.root / "dataset"

    @property
    def gnnpar_parts(self) -> Path:
        """gnnpar's partition directory."""
        return self.root / "gnnpar-parts"

    @property
    def dgl_parts(self) -> Path:
        """DistDGL's partition directory."""
        return self.root / "dgl-parts"

    @property
    def dgl_config(self) -> Path:
        """DistDGL's partition config JSON."""
        return self.dgl_parts / f"{self.name}.json"


def prepare_graph(name: str, args: argparse.Namespace, work: Path, dgl_python: Path,
                  partition_tool: str, log_dir: Path) -> Graph:
    """Generate, save and partition one graph for both systems (cached by parameters)."""
    from gnnpar.datasets import synthetic

    if name in REAL_GRAPHS:
        params: dict[str, Any] = {"real_graph": name, "num_parts": 2}
        root = work / "graphs" / name
    else:
        params = {"generator": name, "num_nodes": args.nodes, "avg_degree": args.avg_degree,
                  "num_classes": args.classes, "feat_dim": args.feat_dim,
                  "homophily": args.homophily, "seed": args.graph_seed,
                  "to_undirected": True, "num_parts": 2}
        root = work / "graphs" / f"{name}-{args.nodes}"
    g = Graph(name, root, params)
    stamp = g.root / "bench-params.json"
    if not stamp.is_file() or json.loads(stamp.read_text()) != params:
        shutil.rmtree(g.root, ignore_errors=True)
    g.root.mkdir(parents=True, exist_ok=True)

    if not (g.dataset / "dataset.json").is_file():
        t0 = time.perf_counter()
        if name in REAL_GRAPHS:
            import real_graphs  # benchmarks/real_graphs.py: already undirected

            real_graphs.load(name, work / "real").save(g.dataset, overwrite=True)
        else:
            make = synthetic.sbm if name == "sbm" else synthetic.rmat
            ds = make(num_nodes=args.nodes, avg_degree=args.avg_degree,
                      num_classes=args.classes, feat_dim=args.feat_dim,
                      homophily=args.homophily, seed=args.graph_seed)
            ds.to_undirected().save(g.dataset, overwrite=True)
        g.info["generate_s"] = time.perf_counter() - t0
        print(f"{name}: generated and saved in {g.info['generate_s']:.1f} s", flush=True)
    meta = json.loads((g.dataset / "dataset.json").read_text())
    g.info.update(num_nodes=meta["num_nodes"], num_edges=meta["num_edges"],
                  num_classes=meta["num_classes"], feat_dim=meta["feat_dim"])

    if not (g.gnnpar_parts / "meta.json").is_file():
        t0 = time.perf_counter()
        shutil.rmtree(g.gnnpar_parts, ignore_errors=True)
        # Partitioned for the training that follows, as a user who partitions apart does.
        _run([partition_tool, str(g.dataset), "--num-parts", "2", "--out", str(g.gnnpar_parts),
              "--work-fanouts", args.fanouts, "--work-batch-size", str(args.batch_size),
              "--no-progress"], f"gnnpar-partition of {name}",
             log_dir / f"{name}-gnnpar-partition.log")
        g.info["gnnpar_partition_s"] = time.perf_counter() - t0
        print(f"{name}: gnnpar-partition in {g.info['gnnpar_partition_s']:.1f} s", flush=True)
    dgl_stats = g.dgl_parts / "bench-partition.json"
    if not (g.dgl_config.is_file() and dgl_stats.is_file()):
        t0 = time.perf_counter()
        shutil.rmtree(g.dgl_parts, ignore_errors=True)
        out = _run([str(dgl_python), str(WORKER), "partition", "--dataset", str(g.dataset),
                    "--name", name, "--out", str(g.dgl_parts)],
                   f"DGL partition_graph of {name}", log_dir / f"{name}-dgl-partition.log",
                   env=dgl_env(), cwd=g.root)
        g.info["dgl_partition_s"] = time.perf_counter() - t0
        dgl_stats.write_text(out.strip().splitlines()[-1])
        print(f"{name}: DGL partition_graph in {g.info['dgl_partition_s']:.1f} s", flush=True)
    g.info["dgl_partition"] = json.loads(dgl_stats.read_text())
    g.info["gnnpar_partition"] = gnnpar_partition_quality(g.gnnpar_parts)
    stamp.write_text(json.dumps(params))
    return g


# ---------------------------------------------------------------------------------- runs
def dgl_env(**extra: str) -> dict[str, str]:
    """Environment of a DGL-venv process: this one's, minus Python paths, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(DGLBACKEND="pytorch", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               GLOO_SOCKET_IFNAME="lo", PYTHONUNBUFFERED="1", **extra)
    return env


def _wait_exec(proc: Proc, python: Path, timeout_s: float = 60) -> None:
    """Wait until ``proc`` runs ``python`` (after ``unshare`` and the tmpfs mount).

    Only then may a trainer ``nsenter`` its mount namespace: the command lines of
    ``unshare`` and ``sh`` already name the worker, their executables do not.
    """
    exe = os.path.realpath(python)
    own_ns = os.readlink("/proc/self/ns/mnt")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll():
            raise BenchError(f"{proc.role} exited with status {proc.rc} before it started "
                             f"(unshare -m and mount need root); log {proc.log}:\n"
                             f"{proc.tail()}")
        try:
            pid = proc.popen.pid
            if (os.readlink(f"/proc/{pid}/exe") == exe
                    and os.readlink(f"/proc/{pid}/ns/mnt") != own_ns):
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise BenchError(f"{proc.role} did not start within {timeout_s:.0f} s; log {proc.log}")


def run_distdgl(g: Graph, args: argparse.Namespace, dgl_python: Path, run_dir: Path,
                seed: int) -> dict[str, Any]:
    """One DistDGL run: 2 simulated machines, each a server and a trainer; its figures."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    hosts = ["127.0.0.1", "127.0.0.2"]
    ip_config = run_dir / "ip_config.txt"
    ip_config.write_text("".join(f"{h} {free_port(h)}\n" for h in hosts))
    result = run_dir / "result.json"
    common = dict(DGL_NUM_SAMPLER="0", DGL_NUM_SERVER="1", DGL_NUM_CLIENT=str(len(hosts)),
                  DGL_CONF_PATH=str(g.dgl_config), DGL_IP_CONFIG=str(ip_config),
                  DGL_GRAPH_FORMAT="csc")
    # DGL's gnnpar-equivalent fan-outs: reverse order (input layer first).
    dgl_fanouts = ",".join(reversed(args.fanouts.split(",")))
    master_port = free_port(hosts[0])
    group = Group("DistDGL")
    t0 = time.perf_counter()
    try:
        servers = []
        for m in range(len(hosts)):
            shell = (f"mount -t tmpfs tmpfs /dev/shm && exec {dgl_python} {WORKER} serve")
            servers.append(group.start(
                f"server{m}", ["unshare", "-m", "--propagation", "private", "sh", "-c", shell],
                dgl_env(DGL_ROLE="server", DGL_SERVER_ID=str(m), **common),
                run_dir / f"server{m}.log", run_dir))
        for m, server in enumerate(servers):
            _wait_exec(server, dgl_python)
            # DGL's tools/launch.py starts each machine's trainers with torch.distributed.run,
            # which puts every worker in a session of its own.
            group.start(f"trainer{m}", [
                "nsenter", "-t", str(server.popen.pid), "-m", "--", str(dgl_python), "-m",
                "torch.distributed.run", f"--nproc_per_node={TRAINERS_PER_MACHINE}",
                f"--nnodes={len(hosts)}", f"--node_rank={m}", f"--master_addr={hosts[0]}",
                f"--master_port={master_port}",
                str(WORKER), "train", "--ip-config", str(ip_config), "--name", g.name,
                "--part-config", str(g.dgl_config),
                "--num-classes", str(g.info["num_classes"]), "--fanouts", dgl_fanouts,
                "--batch-size", str(args.batch_size), "--eval-batch-size",
                str(args.eval_batch_size), "--epochs", str(args.epochs), "--hidden",
                str(args.hidden), "--dropout", str(args.dropout), "--lr", str(args.lr),
                "--seed", str(seed), "--threads", "1", "--result", str(result)],
                dgl_env(DGL_ROLE="client", DGL_DIST_MODE="distributed", DGL_GROUP_ID="0",
                        **common),
                run_dir / f"trainer{m}.log", run_dir)
        wait_all(group, args.timeout, fail_marker="Traceback (most recent call last)")
    finally:
        group.kill()
    wall = time.perf_counter() - t0
    if not result.is_file():
        raise BenchError(f"DistDGL finished without {result}; see {run_dir}/trainer0.log")
    res = json.loads(result.read_text())
    per = {p.role: {"cpu_s": p.cpu_s, "maxrss_bytes": p.maxrss_bytes} for p in group.procs}
    s = res["summary"]
    return {
        "system": "DistDGL", "seed": seed, "run_dir": str(run_dir), "wall_s": wall,
        "epoch_times_s": [e["epoch_time_s"] for e in res["epochs"]],
        "step_times_s": [e.get("step_time_s") for e in res["epochs"]],
        "rank_cpu_s": [e["rank_time_s"]["cpu"] for e in res["epochs"]],
        "sampled_edges": [e["sampled_edges"] for e in res["epochs"]],
        "test_acc_sampled": s["test_acc_sampled"], "test_acc_full": s.get("test_acc_full"),
        "val_acc_sampled": s["val_acc_sampled"], "val_acc_full": s.get("val_acc_full"),
        "cpu_s": sum(p.cpu_s for p in group.procs),
        "cpu_s_by_role": {r: sum(v["cpu_s"] for k, v in per.items() if k.startswith(r))
                          for r in ("server", "trainer")},
        "maxrss_bytes": max(p.maxrss_bytes for p in group.procs),
        "maxrss_bytes_by_role": {r: max(v["maxrss_bytes"] for k, v in per.items()
                                        if k.startswith(r)) for r in ("server", "trainer")},
        "processes": per, "detail": res,
    }


def run_gnnpar(g: Graph, args: argparse.Namespace, train_tool: str, flags: set[str],
               run_dir: Path, seed: int) -> dict[str, Any]:
    """One gnnpar run (``gnnpar-train --nproc 2``); its figures."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    argv = [train_tool, str(g.gnnpar_parts), "--nproc", "2", "--model", "sage", "--hidden",
            str(args.hidden), "--layers", "2", "--fanouts", args.fanouts, "--batch-size",
            str(args.batch_size), "--epochs", str(args.epochs), "--lr", str(args.lr),
            "--dropout", str(args.dropout), "--threads", "1", "--seed", str(seed),
            "--eval-batch-size", str(args.eval_batch_size), "--out", str(run_dir)]
    optional = {"--eval-every": [str(args.epochs)], "--no-progress": []}
    for flag, value in optional.items():
        if flag in flags:
            argv += [flag, *value]
    argv += args.gnnpar_flags.split()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "GLOO_SOCKET_IFNAME": "lo", "PYTHONUNBUFFERED": "1"}
    log = run_dir.parent / f"{run_dir.name}.log"
    group = Group("gnnpar")
    t0 = time.perf_counter()
    try:
        proc = group.start("gnnpar-train", argv, env, log, run_dir.parent)
        wait_all(group, args.timeout)
    finally:
        group.kill()
    wall = time.perf_counter() - t0
    record = gnnpar_record(run_dir)
    launcher = proc.popen.pid
    workers = [h for pid, h in group.hwm.items() if pid != launcher]
    return {
        "system": "gnnpar", "seed": seed, "run_dir": str(run_dir), "wall_s": wall,
        "argv": argv, "epoch_times_s": gnnpar_epoch_times(record),
        "step_times_s": gnnpar_phases(record),
        "rank_cpu_s": gnnpar_rank_cpu(record),
        "sampled_edges": gnnpar_sampled_edges(record),
        "test_acc_sampled": gnnpar_test_acc(record),
        "test_acc_full": gnnpar_test_acc_full(record),
        "cpu_s": proc.cpu_s, "maxrss_bytes": proc.maxrss_bytes,
        "maxrss_bytes_by_role": {"launcher": group.hwm.get(launcher),
                                 "worker": max(workers) if workers else None},
        "processes_seen": {str(pid): {"vmhwm_bytes": h, "cmd": group.cmd.get(pid, "")[:200]}
                           for pid, h in group.hwm.items()},
    }


# -------------------------------------------------------------------------------- report
def _median(xs: Sequence[float | None]) -> float | None:
    vals = [float(x) for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def _steady_epoch_cpu(run: dict[str, Any]) -> float | None:
    """CPU seconds of one steady epoch's training steps, all ranks (median over epochs)."""
    epochs = run["rank_cpu_s"][1:] or run["rank_cpu_s"]
    return _median([sum(c) for c in epochs])


RATIOS = {
    "epoch": lambda r: _median(r["epoch_times_s"][1:] or r["epoch_times_s"]),
    "epoch_cpu": _steady_epoch_cpu,
    "run_cpu": lambda r: r["cpu_s"],
    "wall": lambda r: r["wall_s"],
    "peak_rss": lambda r: r["maxrss_bytes"],
}
"""The figures compared round by round (gnnpar's over DistDGL's in the same round)."""


def round_ratios(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, minimum and maximum over the rounds of each figure's per-round ratio B/A."""
    out: dict[str, Any] = {}
    for key, figure in RATIOS.items():
        per = [fb / fa for ra, rb in zip(a, b, strict=True)
               if (fa := figure(ra)) and (fb := figure(rb)) is not None]
        out[key] = {"median": _median(per), "min": min(per, default=None),
                    "max": max(per, default=None), "per_round": per}
    return out


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of one system's runs (epoch times pooled over repeats, warm-up dropped)."""
    steady = [t for r in runs for t in r["epoch_times_s"][1:]] or \
        [t for r in runs for t in r["epoch_times_s"]]
    out: dict[str, Any] = {
        "runs": len(runs),
        "epoch_s_median": _median(steady),
        "epoch_s_per_run_median": [_median(r["epoch_times_s"][1:] or r["epoch_times_s"])
                                   for r in runs],
        "sampled_edges_median": _median([x for r in runs for x in r["sampled_edges"][1:]]),
        "cpu_s_median": _median([r["cpu_s"] for r in runs]),
        "load1_before_median": _median([r.get("load_avg_before", [None])[0] for r in runs]),
        "wall_s_median": _median([r["wall_s"] for r in runs]),
        "maxrss_bytes": max(r["maxrss_bytes"] for r in runs),
        "test_acc_sampled_mean": statistics.fmean(r["test_acc_sampled"] for r in runs),
        "test_acc_sampled": [r["test_acc_sampled"] for r in runs],
        "test_acc_full": [r["test_acc_full"] for r in runs],
    }
    out["epoch_cpu_s_median"] = _median([_steady_epoch_cpu(r) for r in runs])
    out["rank_cpu_max_over_mean_median"] = _median(
        [max(c) / statistics.fmean(c) for r in runs for c in r["rank_cpu_s"][1:]
         if statistics.fmean(c) > 0])
    full = [r["test_acc_full"] for r in runs if r["test_acc_full"] is not None]
    out["test_acc_full_mean"] = statistics.fmean(full) if full else None
    # Seconds per rank and epoch by phase, median over the steady epochs of all runs.
    steady_phases = [e for r in runs for e in r.get("step_times_s", [])[1:] if e]
    keys = sorted({k for e in steady_phases for k in e})
    out["phase_s_median"] = {k: _median([e.get(k) for e in steady_phases]) for k in keys}
    roles = sorted({k for r in runs for k in r.get("maxrss_bytes_by_role", {})})
    out["maxrss_bytes_by_role"] = {
        k: max((r["maxrss_bytes_by_role"].get(k) or 0) for r in runs) for k in roles}
    if "cpu_s_by_role" in runs[0]:
        out["cpu_s_by_role_median"] = {k: _median([r["cpu_s_by_role"][k] for r in runs])
                                       for k in runs[0]["cpu_s_by_role"]}
    return out


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f} MiB"


def print_table(g: Graph, a: dict[str, Any], b: dict[str, Any], rounds: dict[str, Any],
                args: argparse.Namespace, load: tuple[list[float], list[float]]
                ) -> dict[str, Any]:
    """Print one graph's comparison (B/A: medians of per-round ratios); return the ratios."""
    def per_round(key: str) -> str:
        q = rounds[key]
        return "-" if q["median"] is None else (
            f"{q['median']:.2f}x ({q['min']:.2f}-{q['max']:.2f})")

    r_epoch = rounds["epoch"]["median"]
    r_cpu = rounds["run_cpu"]["median"]
    d_acc = 100 * (b["test_acc_sampled_mean"] - a["test_acc_sampled_mean"])
    i = g.info
    print(f"\n== {g.name}: {i['num_nodes']:,} nodes, {i['num_edges']:,} directed edges "
          f"(symmetric), {i['feat_dim']} features, {i['num_classes']} classes; 2 parts (METIS)"
          f"; GraphSAGE 2x{args.hidden}, fan-outs {args.fanouts} (DGL "
          f"[{','.join(reversed(args.fanouts.split(',')))}]), batch {args.batch_size}/trainer,"
          f" 2 trainers x 1 thread; {args.epochs} epochs (first dropped), "
          f"{a['runs']}+{b['runs']} runs A,B,A,B...")
    rows = [
        ("epoch time, median s", f"{a['epoch_s_median']:.3f}", f"{b['epoch_s_median']:.3f}",
         per_round("epoch"), f"<= {GOALS['epoch']}x"),
        ("  per run", " ".join(f"{x:.2f}" for x in a["epoch_s_per_run_median"]),
         " ".join(f"{x:.2f}" for x in b["epoch_s_per_run_median"]), "", ""),
        ("sampled edges / epoch, median",
         "-" if a["sampled_edges_median"] is None else f"{a['sampled_edges_median'] / 1e6:.2f} M",
         "-" if b["sampled_edges_median"] is None else f"{b['sampled_edges_median'] / 1e6:.2f} M",
         "", ""),
        ("CPU s per run (all procs), median", f"{a['cpu_s_median']:.1f}",
         f"{b['cpu_s_median']:.1f}", per_round("run_cpu"), f"<= {GOALS['cpu']}x"),
        ("CPU s per steady epoch (trainers)", f"{a['epoch_cpu_s_median']:.2f}",
         f"{b['epoch_cpu_s_median']:.2f}", per_round("epoch_cpu"), ""),
        ("  rank CPU max/mean, median", f"{a['rank_cpu_max_over_mean_median']:.3f}",
         f"{b['rank_cpu_max_over_mean_median']:.3f}", "", "<= 1.02"),
        ("  DGL servers / trainers", "{:.1f} / {:.1f}".format(
            *a["cpu_s_by_role_median"].values()), "", "", ""),
        ("wall s per run, median", f"{a['wall_s_median']:.1f}", f"{b['wall_s_median']:.1f}",
         per_round("wall"), ""),
        ("peak RSS, max over processes", _mib(a["maxrss_bytes"]), _mib(b["maxrss_bytes"]),
         per_round("peak_rss"), "<= 1x"),
        ("  DGL server / trainer", f"{_mib(a['maxrss_bytes_by_role'].get('server'))} / "
         f"{_mib(a['maxrss_bytes_by_role'].get('trainer'))}", "", "", ""),
        ("  gnnpar worker / launcher (VmHWM)", "",
         f"{_mib(b['maxrss_bytes_by_role'].get('worker'))} / "
         f"{_mib(b['maxrss_bytes_by_role'].get('launcher'))}", "", ""),
        ("test acc sampled, mean", f"{a['test_acc_sampled_mean']:.4f}",
         f"{b['test_acc_sampled_mean']:.4f}", f"{d_acc:+.2f} pt",
         f"within {GOALS['acc_points']} pt"),
        ("test acc full-neighbour, mean",
         "-" if a["test_acc_full_mean"] is None else f"{a['test_acc_full_mean']:.4f}",
         "-" if b["test_acc_full_mean"] is None else f"{b['test_acc_full_mean']:.4f}", "", ""),
    ]
    qa, qb = i["dgl_partition"].get("quality", {}), i.get("gnnpar_partition", {})

    def part(q: dict[str, Any]) -> str:
        if not q:
            return "-"
        imb = q.get("imbalance", {})
        return (f"cut {100 * q['edge_cut_share']:.1f}%, repl {q['replication_factor']:.2f}, "
                f"imb {imb.get('nodes', 0):.3f}/{imb.get('train', 0):.3f}/"
                f"{imb.get('edges', 0):.3f}")

    print(f"partitions (METIS, 2 parts; imbalance nodes/train/edges): DistDGL {part(qa)}; "
          f"gnnpar {part(qb)}")
    w = [34, 22, 22, 10, 14]
    head = ("", "A: DistDGL 2.1.0", "B: gnnpar", "B/A", "goal")
    print("  ".join(h.ljust(n) if j == 0 else h.rjust(n) for j, (h, n) in
                    enumerate(zip(head, w, strict=True))))
    for row in rows:
        print("  ".join(c.ljust(n) if j == 0 else c.rjust(n) for j, (c, n) in
                        enumerate(zip(row, w, strict=True))))
    print_phases(a["phase_s_median"], b["phase_s_median"], w)
    print(f"load average (1, 5, 15 min): start {load[0]}, end {load[1]}; 1-min load before "
          f"the runs, median: DistDGL {a['load1_before_median']}, gnnpar "
          f"{b['load1_before_median']}")
    return {"epoch_ratio": r_epoch, "cpu_ratio": r_cpu, "test_acc_delta_points": d_acc,
            "per_round": rounds,
            "meets_epoch_goal": r_epoch is not None and r_epoch <= GOALS["epoch"],
            "meets_cpu_goal": r_cpu is not None and r_cpu <= GOALS["cpu"],
            "meets_acc_goal": abs(d_acc) <= GOALS["acc_points"],
            "acc_not_worse_than_goal": d_acc >= -GOALS["acc_points"]}


PHASE_ROWS = (
    ("sample + fetch", ("sample",), ("sample", "fetch")),
    ("  of which wait (blocked in exchanges)", (), ("wait",)),
    ("forward", ("forward",), ("forward",)),
    ("backward (DDP all-reduce included)", ("backward",), ("backward",)),
    ("optimizer", ("optimizer",), ("optimizer",)),
)
"""Rows of the per-phase table: DistDGL's phases and gnnpar's that each row adds up."""


def print_phases(a: dict[str, float | None], b: dict[str, float | None],
                 widths: list[int]) -> None:
    """Seconds per rank and epoch by phase, side by side (medians of steady epochs)."""
    def total(p: dict[str, float | None], keys: tuple[str, ...]) -> float | None:
        vals = [p.get(k) for k in keys]
        return None if not keys or any(v is None for v in vals) else sum(
            v for v in vals if v is not None)

    print("per epoch and rank, by phase (median s):")
    for name, dgl_keys, our_keys in PHASE_ROWS:
        x, y = total(a, dgl_keys), total(b, our_keys)
        cells = (name, "-" if x is None else f"{x:.3f}", "-" if y is None else f"{y:.3f}",
                 f"{y / x:.2f}x" if x and y is not None else "", "")
        print("  ".join(c.ljust(n) if j == 0 else c.rjust(n) for j, (c, n) in
                        enumerate(zip(cells, widths, strict=True))))


# ---------------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--graph", default="sbm",
                   help=f"comma-separated, of {', '.join(GENERATED + REAL_GRAPHS)}; 'both': "
                   "sbm,rmat; real graphs are built from this machine (real_graphs.py)")
    p.add_argument("--small", action="store_true", help="20k nodes, 2 repeats")
    p.add_argument("--nodes", type=int, default=None, help="default 100000 (20000 --small)")
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--homophily", type=float, default=0.3, help="of both generators")
    p.add_argument("--graph-seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=None, help="runs of each system "
                   "(default 3, 2 with --small)")
    p.add_argument("--epochs", type=int, default=3, help="per run; the first is dropped")
    p.add_argument("--fanouts", default="15,10", help="gnnpar order: seeds' neighbours first")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--eval-batch-size", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--seed", type=int, default=0, help="repeat r runs with seed + r")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    p.add_argument("--max-load", type=float, default=None,
                   help="before each run, wait until the 1-minute load average is below this "
                   "(a shared machine); the load before each run is recorded either way")
    p.add_argument("--max-load-wait", type=float, default=300.0,
                   help="seconds to wait for --max-load before running anyway")
    p.add_argument("--workdir", type=Path, default=Path("/work/bench-distdgl"))
    p.add_argument("--dgl-venv", type=Path, default=Path("/work/.distdgl-venv"))
    p.add_argument("--dgl-base-python", default="python3",
                   help="python that creates the DGL venv (DGL 2.1.0 wheels: 3.8-3.12)")
    p.add_argument("--gnnpar-bin", type=Path, default=Path(sys.executable).parent,
                   help="directory of gnnpar-train and gnnpar-partition")
    p.add_argument("--gnnpar-flags", default="",
                   help="more gnnpar-train flags, space-separated (e.g. --no-peer-reads: "
                   "ranks exchange what they could read from each other's parts)")
    p.add_argument("--json", type=Path, default=None, help="write every figure here")
    p.add_argument("--plot", type=Path, default=None,
                   help="draw the medians (epoch s, CPU s per run) as a PNG here")
    args = p.parse_args(argv)
    args.nodes = args.nodes or (20_000 if args.small else 100_000)
    args.repeats = args.repeats or (2 if args.small else 3)
    args.graphs = ["sbm", "rmat"] if args.graph == "both" else args.graph.split(",")
    unknown = sorted(set(args.graphs) - set(GENERATED + REAL_GRAPHS))
    if unknown:
        p.error(f"--graph {','.join(unknown)}: not one of {', '.join(GENERATED + REAL_GRAPHS)}")
    if args.epochs < 2:
        p.error("--epochs must be >= 2 (the first epoch is dropped as warm-up)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; the exit status."""
    args = parse_args(argv)
    for tool in ("unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            print(f"bench_vs_distdgl: {tool} not found; install util-linux.", file=sys.stderr)
            return 2
    if os.geteuid() != 0:
        print("bench_vs_distdgl: run as root (each simulated DistDGL machine needs "
              "`unshare -m` and a tmpfs on its own /dev/shm).", file=sys.stderr)
        return 2
    work = args.workdir.resolve()
    log_dir = work / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    load_start = [round(x, 2) for x in os.getloadavg()]
    shm_before = set(os.listdir("/dev/shm"))
    try:
        with terminate_on_signal():
            dgl_versions = ensure_dgl_env(args.dgl_venv, args.dgl_base_python, log_dir)
            dgl_python = args.dgl_venv / "bin" / "python"
            train_tool = gnnpar_tool(args.gnnpar_bin, "gnnpar-train")
            part_tool = gnnpar_tool(args.gnnpar_bin, "gnnpar-partition")
            flags = gnnpar_train_flags(train_tool)
            need = {"--nproc", "--model", "--hidden", "--layers", "--fanouts", "--batch-size",
                    "--epochs", "--lr", "--dropout", "--threads", "--seed", "--out",
                    "--eval-batch-size"}
            if need - flags:
                raise BenchError(f"gnnpar-train has no {sorted(need - flags)}; read "
                                 "`gnnpar-train --help` and update run_gnnpar() here.")
            graphs = args.graphs
            doc: dict[str, Any] = {
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in
                         vars(args).items()},
                "dgl_venv_versions": dgl_versions, "gnnpar_train": train_tool,
                "load_avg_start": load_start, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "machine": f"{os.cpu_count()} CPUs", "graphs": {},
            }
            for name in graphs:
                g = prepare_graph(name, args, work, dgl_python, part_tool, log_dir)
                runs: dict[str, list[dict[str, Any]]] = {"DistDGL": [], "gnnpar": []}
                g_load = [round(x, 2) for x in os.getloadavg()]
                for r in range(args.repeats):
                    seed = args.seed + r
                    base = work / "runs" / f"{name}-{args.nodes}"
                    systems = (
                        ("A", "DistDGL", lambda out, g=g, seed=seed: run_distdgl(
                            g, args, dgl_python, out, seed), base / f"distdgl-{r}"),
                        ("B", "gnnpar", lambda out, g=g, seed=seed: run_gnnpar(
                            g, args, train_tool, flags, out, seed), base / f"gnnpar-{r}"))
                    # Order alternated: A, B in even rounds, B, A in odd ones.
                    systems = systems if r % 2 == 0 else systems[::-1]
                    for tag, system, run, out in systems:
                        load = wait_for_quiet(args.max_load, args.max_load_wait)
                        res = run(out)
                        res["load_avg_before"] = load
                        runs[system].append(res)
                        print(f"[{name} {r + 1}/{args.repeats}] {tag} {system}: epochs "
                              f"{', '.join(f'{t:.2f}' for t in res['epoch_times_s'])} s, "
                              f"CPU {res['cpu_s']:.1f} s, wall {res['wall_s']:.1f} s, "
                              f"test {res['test_acc_sampled']:.4f}, load before {load[0]}",
                              flush=True)
                a, b = summarise(runs["DistDGL"]), summarise(runs["gnnpar"])
                rounds = round_ratios(runs["DistDGL"], runs["gnnpar"])
                g_load_end = [round(x, 2) for x in os.getloadavg()]
                ratios = print_table(g, a, b, rounds, args, (g_load, g_load_end))
                doc["graphs"][name] = {"info": g.info, "params": g.params,
                                       "summary": {"DistDGL": a, "gnnpar": b},
                                       "ratios": ratios, "runs": runs,
                                       "load_avg": {"start": g_load, "end": g_load_end}}
            doc["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
            left = sorted(set(os.listdir("/dev/shm")) - shm_before)
            doc["dev_shm_new_entries"] = left
            print(f"\nload average: start {load_start}, end {doc['load_avg_end']}; entries "
                  f"that appeared in the host's /dev/shm meanwhile (any process's): "
                  f"{left or 'none'}")
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(doc, indent=1) + "\n")
                print(f"figures written to {args.json}")
            if args.plot:
                from gnnpar.plot import plot_table

                rows = {f"{graph} {what}": {system: summ[key] for system, summ in
                                            doc["graphs"][graph]["summary"].items()}
                        for graph in doc["graphs"]
                        for what, key in (("epoch s", "epoch_s_median"),
                                          ("CPU s / run", "cpu_s_median"))}
                print(f"picture: {plot_table('DistDGL vs gnnpar, medians', rows, args.plot)}")
    except BenchError as exc:
        print(f"bench_vs_distdgl: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
