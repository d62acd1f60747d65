#!/usr/bin/env bash
# The CUDA / NCCL check of gnnpar, in one go, on one GPU machine (at most 10 minutes).
#
#   benchmarks/gpu_check.sh [WHEELS [OUT]]
#
# Run from the repository root.  WHEELS (default .whl) is a folder of wheels to install
# without the network — gnnpar's own and what the machine lacks (pymetis, ogb, ...):
# benchmarks/gpu_wheels.sh fills it where PyPI can be reached; torch and torch-geometric
# must be installed already.  Without the folder, `pip install -e ".[test]"` is used.  OUT (default benchmarks/results)
# receives the gpu-tests log, gpu-DATE.json, gpu-DATE.md and the updated README section.
#
# 1. the `gpu` tests (CPU == CUDA samples and rows, link batches and MRR, halo layers,
#    NCCL-only group, sync budget as CUDA counts it, CUDA training within 1 point of
#    CPU);
# 2. benchmarks/bench_gpu.py: the minibatch and full-graph trainers on one GPU (NCCL,
#    world size 1) on a 2M-node / 20M-edge graph, fp32 and bf16, against the same runs
#    on this machine's CPU: epoch time, sampled edges/s, peak GPU memory.
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
(cd /tmp && timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider "$REPO/tests/runtime") \
  2>&1 | tee "$OUT/gpu-tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
timeout 360 python3 benchmarks/bench_gpu.py --out "$OUT" --readme benchmarks/README.md \
  2>&1 | tee "$OUT/bench-gpu.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
cp benchmarks/README.md "$OUT/README.md" 2>/dev/null || true
exit "$status"
