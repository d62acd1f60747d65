#!/usr/bin/env bash
# The CUDA / NCCL check of gnnpar, in one go, on one GPU machine (at most 8 minutes).
#
#   benchmarks/gpu_check.sh [WHEELS [OUT]]
#
# Run from the repository root.  WHEELS (default .whl) is a folder of wheels to install
# without the network — gnnpar's own and what the machine lacks (pymetis, ogb, ...):
# benchmarks/gpu_wheels.sh fills it where PyPI can be reached; torch and torch-geometric
# must be installed already.  Without the folder, `pip install -e ".[test]"` is used.
# OUT (default benchmarks/results) receives the gpu-tests log, gpu-DATE.json, gpu-DATE.md
# and the updated README section.
#
# 1. the `gpu` tests with GNNPAR_FORCE_COLLECTIVES=1, so that one GPU runs every
#    collective through a one-rank NCCL group instead of skipping it (all-to-all of packed
#    uint8 and bf16 rows, empty splits, count all-gathers, halo and grid exchanges, DDP):
#    CPU == CUDA samples, rows, link batches and MRR, halo and grid layers; the device
#    shadow's host-read budgets as CUDA counts them (set_sync_debug_mode); no collective
#    with a host tensor; CUDA training within 1 point of CPU;
# 2. benchmarks/bench_gpu.py on an ogbn-products-scale graph (2.45M nodes, ~61M edges):
#    sampled edges/s, feature gather and device copy bandwidth against the goals, and the
#    trainers on the GPU (fp32, bf16) and on this machine's CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=${1:-.whl}
OUT=${2:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

if [ -d "$WHEELS" ]; then
  SITE=/tmp/gnnpar-site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHEELS"/*.whl || exit 1
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
else
  python3 -m pip install -q -e ".[test]" || exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cd /tmp && python3 - <<'EOF') || exit 1
import torch, torch.distributed as dist
import gnnpar, pymetis  # noqa: F401  (installed and importable)
assert torch.cuda.is_available(), "torch sees no GPU"
assert dist.is_nccl_available(), "this torch has no NCCL"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL "
      f"{'.'.join(map(str, torch.cuda.nccl.version()))}, {torch.cuda.device_count()} GPU(s), "
      f"gnnpar {gnnpar.__version__}")
EOF

status=0
# From outside the tree, so that the installed gnnpar, not the source folder, is imported.
REPO=$(pwd)
(cd /tmp && GNNPAR_FORCE_COLLECTIVES=1 timeout 200 python3 -m pytest -q -m gpu \
  -p no:cacheprovider "$REPO/tests/runtime") 2>&1 | tee "$OUT/gpu-tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
timeout 240 python3 benchmarks/bench_gpu.py --out "$OUT" --readme benchmarks/README.md \
  2>&1 | tee "$OUT/bench-gpu.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
cp benchmarks/README.md "$OUT/README.md" 2>/dev/null || true
exit "$status"
