#!/usr/bin/env bash
# The CUDA / NCCL check of gnnpar: one call on one GPU machine, at most 8 minutes.
#
#   benchmarks/gpu_check.sh --out OUT [--wheels DIR] [--budget-s 480]
#   benchmarks/gpu_check.sh --out OUT --dry-run      # the same steps on a CPU: gloo, tiny
#
# The script runs from its copy of the repository.  DIR (default: .whl in that copy, made
# by benchmarks/gpu_wheels.sh where PyPI can be reached; carry it with the tree) holds
# gnnpar's wheel and those of the dependencies the GPU machine may lack, each installed
# without the network only where the machine lacks it (torch, torch-geometric, numba and
# pytest must be there).
# Without DIR the installed gnnpar is used.  --dry-run installs nothing, needs no GPU and
# takes about a minute on 2 cores: every step still starts, parses its records and writes
# its files, so a renamed flag or a moved module fails in CI (tests/test_gpu_check.py)
# rather than during a GPU lease.
#
# Steps, each with its own timeout, so that one failure hides nothing else:
# 1. environment: the GPU, torch, CUDA, NCCL, the gnnpar imported;
# 2. at the same time:
#    a. benchmarks/gpu_paths.py: every user path (the main job, full graph, 3D grid, link
#       with strict negatives and edge features, typed with sharded embeddings, bf16,
#       predictions -> gnnpar-predict -> gnnpar-export, SIGKILL -> --resume), each
#       command on CUDA beside the same command on the CPU with the same seeds, figures
#       from their run records;
#    b. the `gpu` tests (tests/test_gpu.py) with GNNPAR_FORCE_COLLECTIVES=1:
#       CPU == CUDA samples, rows, link batches, halo and grid layers, every collective
#       path through a one-rank NCCL group, the host-sync budgets as CUDA counts them
#       (torch.cuda.set_sync_debug_mode); the training test is left to step 2a, which
#       runs the same comparison on every path;
# 3. benchmarks/bench_gpu.py last, in the minutes left: sampled edges/s, gather and device
#    copy bandwidth, epochs on the GPU and on this machine's CPU, peak GPU memory.
#
# OUT receives at most 8 files: check.log (everything printed), paths.json and paths.md,
# tests.log, gpu-DATE.json and gpu-DATE.md, summary.md (each step's status and seconds,
# then the tables).  The exit status is 0 when every step passed.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT="" WHEELS=$REPO/.whl BUDGET=480 DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --wheels) WHEELS=$2; shift 2 ;;
    --budget-s) BUDGET=$2; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    *) echo "gpu_check.sh: unknown argument $1; usage: benchmarks/gpu_check.sh --out OUT" \
            "[--wheels DIR] [--budget-s S] [--dry-run]" >&2; exit 2 ;;
  esac
done
if [ -z "$OUT" ]; then
  echo "gpu_check.sh: --out OUT is missing (the folder of the results)" >&2
  exit 2
fi
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
[ ! -d "$WHEELS" ] || WHEELS=$(cd "$WHEELS" && pwd)
cd "$REPO"
PY=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gnnpar-gpu-check-XXXXXX")
mkdir "$WORK/tmp"
export PYTHONUNBUFFERED=1 TMPDIR=$WORK/tmp  # what a killed run leaves goes with WORK
exec > >(tee -a "$OUT/check.log") 2>&1
TEE=$!
STEPS=()
status=0
finish() {  # summary.md, then exit with the calls' status
  {
    echo "# gpu_check.sh$([ "$DRY" = 1 ] && echo ' --dry-run'), $(date '+%Y-%m-%d %H:%M'), $SECONDS s"
    echo
    echo "| step | status | seconds |"
    echo "|---|---|---:|"
    printf '%s\n' "${STEPS[@]}"
    [ -f "$OUT/tests.log" ] && printf '\ngpu tests: %s\n' "$(tail -n 1 "$OUT/tests.log")"
    for f in "$OUT/paths.md" "$OUT"/gpu-*.md; do
      [ -f "$f" ] && { echo; cat "$f"; }
    done
  } > "$OUT/summary.md"
  rm -rf "$WORK"
  exec >&- 2>&-
  wait "$TEE"  # check.log complete before the call returns
  exit "$status"
}
record() {  # record NAME RC SECONDS
  local verdict=ok
  [ "$2" -eq 0 ] || { verdict="failed (exit $2$([ "$2" -eq 124 ] && echo ': timeout'))"; status=1; }
  STEPS+=("| $1 | $verdict | $3 |")
  echo "== $1: $verdict in $3 s"
}

# 1. Environment: gnnpar from its wheel (outside the source tree), a GPU, NCCL.
t0=$SECONDS
rc=0
if [ "$DRY" = 0 ] && [ -d "$WHEELS" ]; then
  SITE=$WORK/site
  for whl in "$WHEELS"/*.whl; do
    dist=$(basename "$whl" | cut -d- -f1)
    if [ "$dist" = gnnpar ] || ! "$PY" -c "import importlib.metadata as m, sys
m.version(sys.argv[1])" "$dist" 2>/dev/null; then  # gnnpar always, the others if missing
      if "$PY" -m pip --version > /dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
          --target "$SITE" "$whl" || rc=1
      else  # no pip: the wheel unpacked (no console scripts: `python3 -m gnnpar.train`)
        "$PY" -m zipfile -e "$whl" "$SITE" || rc=1
      fi
    fi
  done
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
elif [ "$DRY" = 0 ]; then
  echo "no wheel folder $WHEELS: using the gnnpar installed here"
fi
[ "$DRY" = 1 ] || nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cd "$WORK" && "$PY" - "$DRY" "$REPO" "${SITE:-}" <<'EOF') || rc=1
import sys
from pathlib import Path
import torch, torch.distributed as dist
import gnnpar
dry, repo, site = sys.argv[1] == "1", Path(sys.argv[2]), sys.argv[3]
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} "
      f"GPU(s), gnnpar {gnnpar.__version__} from {gnnpar.__file__}")
if site:  # the wheel must hold the tree's code: the tests and the benchmark come from it
    installed = Path(gnnpar.__file__).parent
    stale = [f"{folder}/{f.relative_to(repo / folder)}" for folder, under in (
        ("gnnpar", installed), ("datasets", installed / "datasets"),
        ("partition", installed / "partition")) for f in (repo / folder).rglob("*.py")
        if not (under / f.relative_to(repo / folder)).is_file()
        or (under / f.relative_to(repo / folder)).read_bytes() != f.read_bytes()]
    assert not stale, (f"the gnnpar wheel differs from the tree in {stale[:5]}: run "
                       "benchmarks/gpu_wheels.sh again and carry its folder")
if not dry:
    import pymetis  # noqa: F401  (partitions of the paths)
    assert torch.cuda.is_available(), "torch sees no GPU"
    assert dist.is_nccl_available(), "this torch has no NCCL"
    print("NCCL", ".".join(map(str, torch.cuda.nccl.version())))
EOF
record environment $rc $((SECONDS - t0))
[ $rc -eq 0 ] || finish

# 2. The user paths and the gpu tests side by side.
t0=$SECONDS
if [ "$DRY" = 1 ]; then  # no step may be cut short: generous bounds, no budget
  T_PATHS=400 T_TESTS=200 PATH_FLAGS=(--dry-run --budget-s 350)
else
  T_PATHS=$((BUDGET / 2 + 10)) T_TESTS=$((BUDGET / 2 - 20))
  PATH_FLAGS=(--budget-s $((T_PATHS - 40)))
fi
{ (cd "$WORK" && timeout -k 10 "$T_PATHS" "$PY" "$REPO/benchmarks/gpu_paths.py" \
    --out "$OUT" --work "$WORK/paths" "${PATH_FLAGS[@]}")
  echo $? > "$WORK/rc-paths"; } 2>&1 | sed -u 's/^/[paths] /' &
PATHS_JOB=$!
# From outside the tree, so that the installed gnnpar, not the source folder, is imported.
(cd "$WORK" && GNNPAR_FORCE_COLLECTIVES=1 timeout -k 10 "$T_TESTS" "$PY" -m pytest -q -rA \
  -p no:cacheprovider -m gpu -k "not training_within_one_point" \
  "$REPO/tests/test_gpu.py") > "$OUT/tests.log" 2>&1
rc_tests=$?
[ "$rc_tests" -eq 0 ] || [ "$rc_tests" -eq 124 ] || tail -n 30 "$OUT/tests.log"
echo "[tests] $(tail -n 1 "$OUT/tests.log")"
record "gpu tests (tests.log)" $rc_tests $((SECONDS - t0))

# 3. The benchmark, last and alone, in what is left of the budget (a dry run does not wait
#    for the paths: nothing of it is timed).
bench() {
  local t0=$SECONDS
  if [ "$DRY" = 1 ]; then
    T_BENCH=200 BENCH_FLAGS=(--device cpu --nodes 2000 --epochs 2)
  else
    T_BENCH=$((BUDGET - SECONDS - 10)) BENCH_FLAGS=(--budget-s $((BUDGET - SECONDS - 25)))
    if [ "$T_BENCH" -lt 60 ]; then
      STEPS+=("| benchmark | not run: $T_BENCH s left | 0 |")
      status=1
      return
    fi
  fi
  (cd "$WORK" && timeout -k 10 "$T_BENCH" "$PY" "$REPO/benchmarks/bench_gpu.py" \
    --out "$OUT" --workdir "$WORK/bench" "${BENCH_FLAGS[@]}") 2>&1 | sed -u 's/^/[bench] /'
  record "benchmark (gpu-DATE.md)" "${PIPESTATUS[0]}" $((SECONDS - t0))
}
[ "$DRY" = 0 ] || bench
wait "$PATHS_JOB"
record "user paths (paths.md)" "$(cat "$WORK/rc-paths" 2>/dev/null || echo 1)" $((SECONDS - t0))
[ "$DRY" = 1 ] || bench

finish
