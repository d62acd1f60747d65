r"""Link-prediction accuracy on real graphs: ``gnnpar-train --task link`` against PyG.

``python benchmarks/bench_link_accuracy.py --workdir DIR [--graphs-cache DIR] [--graphs
pyimports,docrefs,debian,synthetic] [--epochs 10] [--configs default batch-size=256 ...]
[--ref-lr 0.005] [--ref-every 10] [--ref-patience 10] [--ref-min-epochs 200]
[--ref-budget-s 3600] [--ref-seeds 0,1] [--json OUT]``

Per graph (the real hub-heavy graphs of ``benchmarks/real_graphs.py`` -- a dependency
graph, an import graph, a citation-like graph of documentation cross-references -- and
the synthetic link task ``sbm(task="link")``), on one link split written as a dataset
directory (``GraphDataset.random_link_split((0.85, 0.05, 0.1), seed=0)``, what ``--split
0.85,0.05,0.1`` makes: validation and test edges leave the graph, 100 uniform candidate
destinations each), so that every run below reads the same edges:

- ``reference``: single-process full-batch PyG, the protocol of issue 27 — ``GraphSAGE``
  2x128 (mean) encoder, dot-product decoder, Adam (``--ref-lr``), no dropout, every epoch
  one gradient step on all training edges and as many random negatives from
  ``torch_geometric.utils.negative_sampling`` (fresh each epoch), binary cross-entropy,
  message passing over all training edges in both directions (the stored graph) -- trained
  as long as it improves: evaluated every ``--ref-every`` epochs, stopped after
  ``--ref-patience`` evaluations without a higher validation MRR (past
  ``--ref-min-epochs``: MRR first falls below chance, a plateau that is not convergence),
  or at the first evaluation past ``--ref-budget-s`` wall seconds, which the table says
  with the curve's last gain (the best validation MRR's rise over the last patience x
  every epochs); its figure is the best-valid evaluation's test MRR (OGB's protocol);
- ``mlp``: the same with a features-only 2x128 MLP encoder (no message passing);
- ``gnnpar`` configurations: ``gnnpar-train DIR --task link --nproc 2`` (METIS parts, one
  thread per rank) with the configuration's flags, every other setting at its default;
  ``default`` has none, the ablations change one setting of :data:`BASE` (the defaults
  of ``--task link``, stated in full so that an ablation keeps its meaning); each reports
  its best-valid evaluation (the summary's ``best``) beside its last epoch.

A GraphSAGE reference below the features-only MLP is refused, with its cause
(:func:`refusal`): a reference that loses to the features alone has not shown that it
trains, and nothing is measured against it.

Every model is scored the same way: the encoder's full-neighbour embeddings of every node
on the training graph, each validation/test edge ranked against its 100 candidates (OGB's
rank, ties counted half) — MRR, Hits@1, Hits@10; the references with
``ogb.linkproppred.Evaluator``, gnnpar with its own exact evaluation (equal to OGB's,
``tests/train/test_link.py``).  Printed as it comes, then the table (graph x run x epochs
x best-valid and last test MRR x reference x MLP x seconds per epoch, wall and CPU).  Runs
are cached in ``--workdir`` (a reference by graph, encoder, seed and its stopping
settings; a gnnpar run by its flags and epochs): rerunning prints what exists and runs
what is missing (``--rerun`` runs the gnnpar configurations again).  The load average
before and after each run is printed and saved: the machine is shared.
"""

from __future__ import annotations

import argparse
import hashlib
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

REAL = ("pyimports", "docrefs", "debian")
GRAPHS = (*REAL, "synthetic")
SPLIT = (0.85, 0.05, 0.1)
HIDDEN = 128
REF_LR = 0.005
KS = (1, 10)  # gnnpar.testing.reference.LINK_KS

BASE: dict[str, str] = {"dropout": "0.0", "lr": "0.002", "fanouts": "10,10", "num-neg": "1",
                        "batch-size": "256", "exclude": "reverse"}
"""The ``--task link`` defaults that the ablations vary one at a time."""

ABLATIONS: dict[str, list[str]] = {
    "dropout": ["0.0", "0.2", "0.5"],
    "lr": ["0.0005", "0.001", "0.002", "0.005", "0.01"],
    "fanouts": ["5,5", "25,25", "100,100"],
    "exclude": ["self", "none"],
    "num-neg": ["3"],
    "batch-size": ["64", "256", "512", "1024"],
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


def run_name(flags: Sequence[str], epochs: int, patience: int | None = None) -> str:
    """The cache directory of a run: its flags, its epochs and its ``--early-stop`` (when
    the benchmark sets it); a run with no flags is named by the defaults it ran with
    (:data:`BASE`), so that a run cached before the defaults changed is never reused."""
    text = "_".join(a.lstrip("-").replace(",", "-") for a in flags) or "default-" + \
        hashlib.sha256(json.dumps(BASE, sort_keys=True).encode()).hexdigest()[:8]
    return f"{text}-e{epochs}" + ("" if patience is None else f"-p{patience}")


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
def reference(dataset: Path, encoder: str, seed: int, args: argparse.Namespace
              ) -> dict[str, Any]:
    """Full-batch PyG training of the issue's protocol, as long as validation improves.

    ``gnnpar.testing.reference.converge_link_reference`` (the tests' reference, one
    thread): evaluated every ``--ref-every`` epochs, stopped after ``--ref-patience``
    evaluations without a higher validation MRR, or by ``--ref-budget-s`` wall seconds
    (which the result says); the best-valid evaluation is its figure, as OGB's protocol
    reports.

    Args:
        dataset: Dataset directory with the link split.
        encoder: ``"sage"`` (GraphSAGE) or ``"mlp"`` (features only).
        seed: Seed of the weights and the negatives.
        args: The command line (``ref_*``).

    Returns:
        ``converge_link_reference``'s result with ``"load_avg"`` (before, after) and the
        settings (``"lr"``, ``"every"``, ``"patience"``, ``"budget_s"``).
    """
    import torch

    from gnnpar.datasets.graph import GraphDataset
    from gnnpar.testing.reference import converge_link_reference

    torch.set_num_threads(1)
    start = load_avg()
    out = converge_link_reference(GraphDataset.load(dataset), encoder, args.ref_lr, seed,
                                  args.ref_every, args.ref_patience,
                                  (args.ref_min_epochs, args.ref_max_epochs), args.ref_budget_s)
    return {**out, "load_avg": [start, load_avg()], "lr": args.ref_lr,
            "every": args.ref_every, "patience": args.ref_patience,
            "min_epochs": args.ref_min_epochs, "budget_s": args.ref_budget_s}


def refusal(ref: dict[str, Any], mlp: dict[str, Any]) -> str | None:
    """Why the GraphSAGE reference ``ref`` may not be reported, or ``None`` when it may.

    A reference below the features-only MLP has not shown that it trains: it is refused,
    with its cause -- the budget or the epoch cap stopped it while it still gained, or it
    converged below the features alone.
    """
    r, m = ref["best"]["test_mrr"], mlp["best"]["test_mrr"]
    if r >= m:
        return None
    gain = ref["last_gain"]
    where = (f"best-valid test MRR {r:.4f} < the features-only MLP's {m:.4f}; stopped at "
             f"epoch {ref['epochs']}")
    if ref["stop"] == "budget":
        return (f"{where} by the time budget ({ref['budget_s']:.0f} s) while still gaining "
                f"{gain['val_mrr']:+.4f} val MRR over its last {gain['epochs']} epochs: not "
                "converged (raise --ref-budget-s)")
    if ref["stop"] == "epochs":
        return (f"{where} by --ref-max-epochs while still gaining {gain['val_mrr']:+.4f} val "
                f"MRR over its last {gain['epochs']} epochs: not converged")
    return (f"{where}, converged (no validation gain in {gain['epochs']} epochs) below the "
            f"features alone: full-batch GraphSAGE at lr {ref['lr']} is no yardstick here")


# ----------------------------------------------------------------------------- gnnpar
def gnnpar_run(dataset: Path, flags: Sequence[str], epochs: int, patience: int | None,
               out: Path) -> dict[str, Any]:
    """``gnnpar-train DATASET --task link --nproc 2 --epochs E [--early-stop P] FLAGS`` and
    its figures.

    Returns:
        ``{"flags", "epochs": [{"epoch", "loss", "val_mrr", "test_mrr", "test_hits@K",
        "epoch_time_s", "cpu_s"}...], "best": the summary's best-valid evaluation,
        "stopped_early", "config": the run's resolved configuration, "seconds",
        "load_avg"}``; ``cpu_s`` is the mean over the ranks of the CPU seconds of the
        epoch's training steps.
    """
    cmd = [sys.executable, "-m", "gnnpar.train", str(dataset), "--task", "link", "--nproc",
           "2", "--epochs", str(epochs), "--root", str(out.parent.parent / "data"),
           *([] if patience is None else ["--early-stop", str(patience)]),
           "--out", str(out), "--overwrite", "--no-progress", *flags]
    start, t0 = load_avg(), time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{shlex.join(cmd)} failed:\n{done.stderr[-3000:]}")
    record = json.loads((out / "record.json").read_text())
    rows = []
    for e in record["epochs"]:
        row: dict[str, Any] = {"epoch": e["epoch"] + 1, "loss": e["train_loss"],
                               "epoch_time_s": e["epoch_time_s"],
                               "cpu_s": float(np.mean(e["rank_time_s"]["cpu"]))}
        for split in ("val", "test"):
            row[f"{split}_mrr"] = e[f"{split}_mrr"]
            row.update({f"{split}_hits@{k}": e[f"{split}_hits"][f"hits@{k}"] for k in KS})
        rows.append(row)
    s = record["summary"]
    return {"flags": list(flags), "epochs": rows, "best": s["best"],
            "stopped_early": s["stopped_early"], "config": record["config"],
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


def _ref_key(encoder: str, seed: int, args: argparse.Namespace) -> str:
    return (f"{encoder}-seed{seed}-lr{args.ref_lr}-every{args.ref_every}-p{args.ref_patience}"
            f"-min{args.ref_min_epochs}-b{args.ref_budget_s:.0f}")


def bench_graph(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every run of one graph (cached), printed as it comes."""
    work: Path = args.workdir
    dataset = link_dataset(name, work, args.graphs_cache)
    print(f"\n== {name}: {dataset} (load average {load_avg()})", flush=True)
    res: dict[str, Any] = {"reference": {}, "gnnpar": {}}
    for encoder in args.ref_encoders:
        for seed in args.ref_seeds:
            key = _ref_key(encoder, seed, args)
            print(f"  {'reference' if encoder == 'sage' else 'mlp'} ({key})", flush=True)
            doc = _cached(work / "reference" / name / f"{key}.json", args.rerun_references,
                          lambda e=encoder, s=seed: reference(dataset, e, s, args))
            res["reference"][key] = doc
            b, gain = doc["best"], doc["last_gain"]
            print(f"    {doc['stop']} at epoch {doc['epochs']}: {doc['seconds']:.0f} s "
                  f"({doc['cpu_seconds']:.0f} CPU s), load {doc['load_avg']}; best-valid "
                  f"epoch {b['epoch']}: {_metrics_text(b)}; last gain {gain['val_mrr']:+.4f} "
                  f"val MRR over {gain['epochs']} epochs")
    wanted = configs(args.base)
    for cname in args.configs:
        flags = wanted[cname]
        run_dir = work / "runs" / name / run_name(flags, args.epochs, args.early_stop)
        print(f"  gnnpar {cname}: {shlex.join(flags) or '(defaults)'}", flush=True)
        doc = _cached(run_dir / "bench.json", args.rerun or _stale(run_dir, flags),
                      lambda f=flags, d=run_dir: gnnpar_run(dataset, f, args.epochs,
                                                            args.early_stop, d))
        res["gnnpar"][cname] = doc
        print(f"    {_setting(doc['config'])}; {doc['seconds']:.0f} s, load "
              f"{doc['load_avg']}")
        for row in doc["epochs"]:
            print(f"    epoch {row['epoch']}: {_metrics_text(row)} "
                  f"({row['epoch_time_s']:.1f} s, {row['cpu_s']:.1f} CPU s)")
    return res


def _stale(run_dir: Path, flags: list[str]) -> bool:
    """Whether a cached run was made with other flags."""
    path = run_dir / "bench.json"
    if not path.is_file():
        return True
    doc = json.loads(path.read_text())
    return bool(doc["flags"] != flags)


def _mean_best(docs: list[dict[str, Any]]) -> float:
    return float(np.mean([d["best"]["test_mrr"] for d in docs]))


def summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The table: per graph and run, best-valid and last test MRR against the references.

    A GraphSAGE reference below the features-only MLP is refused (:func:`refusal`): its
    row says why, and no gap is computed against it.

    Returns:
        The rows printed, as dicts.
    """
    print("\n| graph | run | epochs | best-valid test MRR (epoch) | last test MRR | "
          "reference | MLP | best − reference | best − MLP | s / epoch (CPU s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    table = []
    for name, res in results.items():
        refs = {k: d for k, d in res["reference"].items() if k.startswith("sage")}
        mlps = [d for k, d in res["reference"].items() if k.startswith("mlp")]
        mlp = _mean_best(mlps) if mlps else None  # none run: the gnnpar rows alone
        causes = [c for d in refs.values() if mlps and (c := refusal(d, mlps[0])) is not None]
        for cause in causes:
            print(f"| {name} | reference REFUSED: {cause} | | | | | | | | |")
        ref = None if causes or not refs else _mean_best(list(refs.values()))
        for key, d in [*refs.items(), *((f"mlp ({k})", d) for k, d in
                                        res["reference"].items() if k.startswith("mlp"))]:
            print(f"| {name} | {key} ({d['stop']}, last gain {d['last_gain']['val_mrr']:+.4f} "
                  f"over {d['last_gain']['epochs']}) | {d['epochs']} | "
                  f"{d['best']['test_mrr']:.4f} ({d['best']['epoch']}) | "
                  f"{d['evals'][-1]['test_mrr']:.4f} | | | | | {d['seconds']:.0f} s in all |")
        for cname, d in res["gnnpar"].items():
            rows = d["epochs"]
            best = d["best"]["test_mrr"]
            steady = rows[1:] or rows
            wall = float(np.median([r["epoch_time_s"] for r in steady]))
            cpu = float(np.median([r["cpu_s"] for r in steady]))
            gap = "" if ref is None else f"{best - ref:+.4f}"
            shown = "refused" if causes else "-" if ref is None else f"{ref:.4f}"
            print(f"| {name} | gnnpar {cname} | {len(rows)}"
                  f"{' (early stop)' if d['stopped_early'] else ''} | {best:.4f} "
                  f"({d['best']['epoch'] + 1}) | {rows[-1]['test_mrr']:.4f} | {shown} | "
                  f"{'-' if mlp is None else f'{mlp:.4f}'} | {gap} | "
                  f"{'' if mlp is None else f'{best - mlp:+.4f}'} | {wall:.1f} ({cpu:.1f}) |")
            table.append({"graph": name, "run": cname, "epochs": len(rows),
                          "best_test_mrr": best, "best_epoch": d["best"]["epoch"] + 1,
                          "last_test_mrr": rows[-1]["test_mrr"], "reference": ref,
                          "mlp": mlp, "epoch_s": wall, "epoch_cpu_s": cpu})
    return table


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (module docstring)."""
    p = ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, required=True, help="datasets, runs, results")
    p.add_argument("--graphs-cache", type=Path, default=None,
                   help="directory of real_graphs.py's built graphs (default WORKDIR/graphs)")
    p.add_argument("--graphs", default=",".join(GRAPHS), help=f"of {','.join(GRAPHS)}")
    p.add_argument("--epochs", type=int, default=10, help="epochs of each gnnpar run")
    p.add_argument("--early-stop", type=int, default=None, metavar="P",
                   help="gnnpar runs: --early-stop P (default: the runs' own default)")
    p.add_argument("--base", nargs="*", default=[], metavar="KEY=VALUE",
                   help=f"settings of the ablations' base instead of BASE's ({BASE})")
    p.add_argument("--configs", nargs="*", default=None,
                   help=f"gnnpar runs, of {' '.join(configs())} (default: all; none "
                   "given: only the references)")
    p.add_argument("--ref-seeds", default="0", help="seeds of the references, comma-separated")
    p.add_argument("--ref-lr", type=float, default=REF_LR, help="the references' Adam lr")
    p.add_argument("--ref-every", type=int, default=10, help="references: evaluate every N "
                   "epochs (one full-batch step each)")
    p.add_argument("--ref-patience", type=int, default=10, help="references: stop after N "
                   "evaluations without a higher validation MRR")
    p.add_argument("--ref-budget-s", type=float, default=3600.0, help="references: stop at "
                   "the first evaluation past this many wall seconds (the table says so)")
    p.add_argument("--ref-min-epochs", type=int, default=200,
                   help="references: at least this many epochs (MRR falls below chance "
                   "first, a plateau that is not convergence)")
    p.add_argument("--ref-max-epochs", type=int, default=20_000,
                   help="references: at most this many epochs")
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
          f"gnnpar {args.epochs} epochs x 2 ranks, references until converged (lr "
          f"{args.ref_lr}, every {args.ref_every}, patience {args.ref_patience}, budget "
          f"{args.ref_budget_s:.0f} s), seeds {args.ref_seeds}")
    results = {name: bench_graph(name, args) for name in args.graphs.split(",")}
    table = summary(results)
    if args.json:
        args.json.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "base": args.base,
            "epochs": args.epochs, "early_stop": args.early_stop,
            "reference": {k: getattr(args, f"ref_{k}") for k in (
                "lr", "every", "patience", "min_epochs", "budget_s", "max_epochs")},
            "table": table, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
