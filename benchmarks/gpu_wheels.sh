#!/usr/bin/env bash
# Fill WHEELS (default .whl) with what benchmarks/gpu_check.sh installs on a GPU machine
# without network: gnnpar's own wheel and those of its dependencies that such a machine
# (Python 3.12 with torch, torch-geometric, numba, pytest) may lack — pymetis and scipy;
# gpu_check.sh installs each only where it is missing.  ogb is left out: the check reads
# no OGB dataset.  Run it here, from the repository root, where PyPI can be reached; the
# folder is ignored by git (.gitignore: /.whl/): carry it with the tree (about 40 MB).
#
#   benchmarks/gpu_wheels.sh [WHEELS]        (PYTHON_VERSION=3.12 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${1:-.whl}
PY=${PYTHON_VERSION:-3.12}
mkdir -p "$WHEELS"
rm -f "$WHEELS"/gnnpar-*.whl
python3 -m pip wheel -q --no-deps -w "$WHEELS" .
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$WHEELS" "pymetis>=2023.1" "scipy>=1.10,<2"
ls -l "$WHEELS"
