r"""Link-prediction accuracy on real graphs: ``gnnpar-train --task link`` against PyG.

``python benchmarks/bench_link_accuracy.py --workdir DIR [--graphs-cache DIR] [--graphs
debian,pyimports,synthetic] [--epochs 5] [--configs default dropout=0.5 ...] [--ref-epochs
200] [--ref-seeds 0,1] [--json OUT]``

Per graph (the real hub-heavy graphs of ``benchmarks/real_graphs.py`` and the synthetic
link task ``sbm(task="link")``), on one link split written as a dataset directory
(``GraphDataset.random_link_split((0.85, 0.05, 0.1), seed=0)``, what ``--split
0.85,0.05,0.1`` makes: validation and test edges leave the graph, 100 uniform candidate
destinations each), so that every run below reads the same edges:

- ``reference``: single-process full-batch PyG, the protocol of issue 27 — ``GraphSAGE``
  2x128 (mean) encoder, dot-product decoder, Adam lr 0.005, no dropout, every epoch one
  gradient step on all training edges and as many random negatives from
  ``torch_geometric.utils.negative_sampling`` (fresh each epoch), binary cross-entropy,
  message passing over all training edges in both directions (the stored graph);
- ``mlp``: the same with a features-only 2x128 MLP encoder (no message passing);
- ``gnnpar`` configurations: ``gnnpar-train DIR --task link --nproc 2`` (METIS parts, one
  thread per rank) with the configuration's flags, every other setting at its default;
  ``default`` has none, the ablations change one setting of :data:`BASE` (the defaults
  of ``--task link``, stated in full so that an ablation keeps its meaning).

Every model is scored the same way: the encoder's full-neighbour embeddings of every node
on the training graph, each validation/test edge ranked against its 100 candidates (OGB's
rank, ties counted half) — MRR, Hits@1, Hits@10; the references with
``ogb.linkproppred.Evaluator``, gnnpar with its own exact evaluation (equal to OGB's,
``tests/train/test_link.py``).  Printed per epoch (the references every ``--ref-eval``
epochs), then a table of every run's last epoch.  Runs are cached in ``--workdir`` (a
reference by graph, encoder, seed and epochs; a gnnpar run by its flags): rerunning prints
what exists and runs what is missing (``--rerun`` runs everything again).  The load
average before and after each run is printed and saved: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.config import ArgumentParser

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests" / "train")]  # real_graphs, _reference

REAL = ("debian", "pyimports")
GRAPHS = (*REAL, "synthetic")
SPLIT = (0.85, 0.05, 0.1)
HIDDEN = 128
REF_LR = 0.005
KS = (1, 10)  # _reference.LINK_KS

BASE: dict[str, str] = {"dropout": "0.0", "lr": "0.005", "fanouts": "10,10", "num-neg": "1",
                        "batch-size": "256", "exclude": "reverse"}
"""The ``--task link`` defaults that the ablations vary one at a time."""

ABLATIONS: dict[str, list[str]] = {
    "dropout": ["0.0", "0.2", "0.5"],
    "lr": ["0.002", "0.01", "0.02"],
    "fanouts": ["5,5", "25,25", "100,100"],
    "exclude": ["self", "none"],
    "num-neg": ["3"],
    "batch-size": ["256", "1024"],
}
"""Values of each ablated setting (the others at :data:`BASE`)."""


def configs(base: dict[str, str] | None = None) -> dict[str, list[str]]:
    """``{name: gnnpar-train flags}``: ``default`` (no flags), ``base`` (default
    :data:`BASE`) with another seed (the run-to-run noise) and the one-setting ablations."""
    base = base or BASE
    flags = [a for k, v in base.items() for a in (f"--{k}", v)]
    out: dict[str, list[str]] = {"default": [], "seed=1": [*flags, "--seed", "1"]}
    for key, values in ABLATIONS.items():
        for value in values:
            if value != base[key]:
                out[f"{key}={value}"] = [a for k, v in base.items()
                                         for a in (f"--{k}", value if k == key else v)]
    return out


def run_name(flags: Sequence[str], epochs: int) -> str:
    """The cache directory of a run: its flags (``default`` for none) and its epochs."""
    text = "_".join(a.lstrip("-").replace(",", "-") for a in flags) or "default"
    return f"{text}-e{epochs}"


def load_avg() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(v, 2) for v in os.getloadavg()]


# ------------------------------------------------------------------------------ datasets
def link_dataset(name: str, workdir: Path, graphs_cache: Path) -> Path:
    """The dataset directory of graph ``name`` with the link split (built once)."""
    from gnnpar.datasets.graph import GraphDataset
    from gnnpar.datasets.synthetic import sbm

    out = workdir / "datasets" / name
    if (out / "dataset.json").is_file():
        return out
    if name == "synthetic":
        ds = sbm(seed=0, task="link")  # random_link_split(LINK_SPLIT = SPLIT, seed 0) inside
    else:
        built = graphs_cache / name
        if (built / "real_graph.json").is_file():  # built by real_graphs.py: read as it is
            graph = GraphDataset.load(built)
        else:
            import real_graphs

            graph = real_graphs.load(name, graphs_cache)
        ds = graph.random_link_split(SPLIT, seed=0)
    ds.save(out, overwrite=True)
    return out


# ----------------------------------------------------------------------------- reference
def reference(dataset: Path, encoder: str, epochs: int, seed: int, every: int
              ) -> dict[str, Any]:
    """Full-batch PyG training of the issue's protocol (the tests' reference, one thread).

    Args:
        dataset: Dataset directory with the link split.
        encoder: ``"sage"`` (GraphSAGE) or ``"mlp"`` (features only).
        epochs: Gradient steps, one per epoch.
        seed: Seed of the weights and the negatives.
        every: Evaluate every this many epochs (and after the last).

    Returns:
        ``{"epochs": [{"epoch", "loss", "val_mrr", "test_mrr", "test_hits@K"...}],
        "seconds", "load_avg"}``.
    """
    import torch
    from _reference import train_link_reference

    from gnnpar.datasets.graph import GraphDataset

    torch.set_num_threads(1)
    start, t0 = load_avg(), time.perf_counter()
    out = train_link_reference(GraphDataset.load(dataset), epochs, HIDDEN, REF_LR, encoder,
                               seed, every=every)
    return {"epochs": out["evals"], "seconds": time.perf_counter() - t0,
            "load_avg": [start, load_avg()]}


# ----------------------------------------------------------------------------- gnnpar
def gnnpar_run(dataset: Path, flags: Sequence[str], epochs: int, out: Path
               ) -> dict[str, Any]:
    """``gnnpar-train DATASET --task link --nproc 2 --epochs E FLAGS`` and its per-epoch figures.

    Returns:
        ``{"flags", "epochs": [{"epoch", "loss", "val_mrr", "test_mrr", "test_hits@K"...}],
        "config": the run's resolved configuration, "seconds", "load_avg"}``.
    """
    cmd = [sys.executable, "-m", "gnnpar.train", str(dataset), "--task", "link", "--nproc",
           "2", "--epochs", str(epochs), "--root", str(out.parent.parent / "data"),
           "--out", str(out), "--overwrite", "--no-progress", *flags]
    start, t0 = load_avg(), time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{shlex.join(cmd)} failed:\n{done.stderr[-3000:]}")
    record = json.loads((out / "record.json").read_text())
    rows = []
    for e in record["epochs"]:
        row: dict[str, Any] = {"epoch": e["epoch"] + 1, "loss": e["train_loss"],
                               "epoch_time_s": e["epoch_time_s"]}
        for split in ("val", "test"):
            row[f"{split}_mrr"] = e[f"{split}_mrr"]
            row.update({f"{split}_hits@{k}": e[f"{split}_hits"][f"hits@{k}"] for k in KS})
        rows.append(row)
    return {"flags": list(flags), "epochs": rows, "config": record["config"],
            "seconds": time.perf_counter() - t0, "load_avg": [start, load_avg()]}


# ------------------------------------------------------------------------------ report
def _metrics_text(row: dict[str, Any]) -> str:
    return (f"loss {row['loss']:.4f}, val MRR {row['val_mrr']:.4f}, test MRR "
            f"{row['test_mrr']:.4f}, hits@1 {row['test_hits@1']:.4f}, hits@10 "
            f"{row['test_hits@10']:.4f}")


def _cached(path: Path, rerun: bool, make: Any) -> dict[str, Any]:
    if path.is_file() and not rerun:
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc
    doc = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    return doc


def _setting(cfg: dict[str, Any]) -> str:
    """The settings the ablations vary, as the run resolved them."""
    m, t, s, lk = cfg["model"], cfg["train"], cfg["sample"], cfg["link"]
    return (f"dropout {m['dropout']}, lr {t['lr']}, fanouts {','.join(map(str, s['fanouts']))}"
            f", num-neg {lk['num_neg']}, batch {s['batch_size']}, exclude {lk['exclude']}")


def bench_graph(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every run of one graph (cached), printed as it comes."""
    work: Path = args.workdir
    dataset = link_dataset(name, work, args.graphs_cache)
    print(f"\n== {name}: {dataset} (load average {load_avg()})", flush=True)
    res: dict[str, Any] = {"reference": {}, "gnnpar": {}}
    for encoder in args.ref_encoders:
        for seed in args.ref_seeds:
            key = f"{encoder}-seed{seed}-e{args.ref_epochs}"
            print(f"  {'reference' if encoder == 'sage' else 'mlp'} ({key})", flush=True)
            doc = _cached(work / "reference" / name / f"{key}.json", args.rerun_references,
                          lambda e=encoder, s=seed: reference(dataset, e, args.ref_epochs, s,
                                                              args.ref_eval))
            res["reference"][key] = doc
            print(f"    {doc['seconds']:.0f} s, load {doc['load_avg']}")
            for row in doc["epochs"]:
                print(f"    epoch {row['epoch']}: {_metrics_text(row)}")
    wanted = configs(args.base)
    for cname in args.configs:
        flags = wanted[cname]
        run_dir = work / "runs" / name / run_name(flags, args.epochs)
        print(f"  gnnpar {cname}: {shlex.join(flags) or '(defaults)'}", flush=True)
        doc = _cached(run_dir / "bench.json", args.rerun or _stale(run_dir, flags),
                      lambda f=flags, d=run_dir: gnnpar_run(dataset, f, args.epochs, d))
        res["gnnpar"][cname] = doc
        print(f"    {_setting(doc['config'])}; {doc['seconds']:.0f} s, load "
              f"{doc['load_avg']}")
        for row in doc["epochs"]:
            print(f"    epoch {row['epoch']}: {_metrics_text(row)} "
                  f"({row['epoch_time_s']:.1f} s)")
    return res


def _stale(run_dir: Path, flags: list[str]) -> bool:
    """Whether a cached run was made with other flags."""
    path = run_dir / "bench.json"
    if not path.is_file():
        return True
    doc = json.loads(path.read_text())
    return bool(doc["flags"] != flags)


def summary(results: dict[str, Any]) -> None:
    """One line per run: its last epoch's test figures and the gap to the reference."""
    print("\n| graph | run | epochs | test MRR | hits@1 | hits@10 | vs reference |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, res in results.items():
        refs = [d["epochs"][-1] for k, d in res["reference"].items() if k.startswith("sage")]
        ref = float(np.mean([r["test_mrr"] for r in refs])) if refs else float("nan")
        rows = [(f"reference{' (mean of ' + str(len(refs)) + ')' if len(refs) > 1 else ''}",
                 refs)]
        rows.append(("mlp", [d["epochs"][-1] for k, d in res["reference"].items()
                             if k.startswith("mlp")]))
        rows += [(f"gnnpar {c}", [d["epochs"][-1]]) for c, d in res["gnnpar"].items()]
        for label, last in rows:
            if not last:
                continue
            mean = {k: float(np.mean([r[k] for r in last]))
                    for k in ("test_mrr", "test_hits@1", "test_hits@10")}
            print(f"| {name} | {label} | {last[0]['epoch']} | {mean['test_mrr']:.4f} | "
                  f"{mean['test_hits@1']:.4f} | {mean['test_hits@10']:.4f} | "
                  f"{mean['test_mrr'] - ref:+.4f} |")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (module docstring)."""
    p = ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, required=True, help="datasets, runs, results")
    p.add_argument("--graphs-cache", type=Path, default=None,
                   help="directory of real_graphs.py's built graphs (default WORKDIR/graphs)")
    p.add_argument("--graphs", default=",".join(GRAPHS), help=f"of {','.join(GRAPHS)}")
    p.add_argument("--epochs", type=int, default=5, help="epochs of each gnnpar run")
    p.add_argument("--base", nargs="*", default=[], metavar="KEY=VALUE",
                   help=f"settings of the ablations' base instead of BASE's ({BASE})")
    p.add_argument("--configs", nargs="*", default=None,
                   help=f"gnnpar runs, of {' '.join(configs())} (default: all; none "
                   "given: only the references)")
    p.add_argument("--ref-epochs", type=int, default=200, help="full-batch epochs")
    p.add_argument("--ref-seeds", default="0", help="seeds of the references, comma-separated")
    p.add_argument("--ref-eval", type=int, default=10, help="reference: evaluate every N epochs")
    p.add_argument("--ref-encoders", default="sage,mlp",
                   help="references to run: sage (GraphSAGE), mlp (features only)")
    p.add_argument("--rerun", action="store_true",
                   help="run the gnnpar configurations again even when cached (after a "
                   "change of the defaults)")
    p.add_argument("--rerun-references", action="store_true",
                   help="run the references again even when cached")
    p.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = p.parse_args(argv)
    args.graphs_cache = args.graphs_cache or args.workdir / "graphs"
    args.ref_seeds = [int(s) for s in args.ref_seeds.split(",")]
    args.ref_encoders = [e for e in args.ref_encoders.split(",") if e]
    given = dict(item.split("=", 1) for item in args.base)
    if set(given) - set(BASE):
        raise SystemExit(f"--base takes settings of {list(BASE)}, got {sorted(given)}.")
    args.base = {**BASE, **given}
    known = configs(args.base)
    args.configs = list(known) if args.configs is None else args.configs
    unknown = sorted(set(args.configs) - set(known))
    if unknown:
        raise SystemExit(f"unknown --configs {unknown}; choose from {list(known)}.")
    print(f"bench_link_accuracy: {os.cpu_count()} CPUs, load average {load_avg()}, "
          f"gnnpar {args.epochs} epochs x 2 ranks, references {args.ref_epochs} full-batch "
          f"epochs, seeds {args.ref_seeds}")
    results = {name: bench_graph(name, args) for name in args.graphs.split(",")}
    summary(results)
    if args.json:
        args.json.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "base": args.base,
            "epochs": args.epochs, "ref_epochs": args.ref_epochs, "results": results},
            indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
