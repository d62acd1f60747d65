#!/usr/bin/env bash
# Fill WHEELS (default .whl) with what benchmarks/gpu_check.sh installs on a GPU machine
# that has no network: gnnpar's own wheel and the packages such a machine (Python 3.12,
# torch and torch-geometric already installed) lacks.  Run it here, from the repository
# root, where PyPI can be reached; keep the folder out of git (`echo /.whl/ >>
# .git/info/exclude`) and carry it with the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${1:-.whl}
PY=${PYTHON_VERSION:-3.12}
mkdir -p "$WHEELS"
rm -f "$WHEELS"/gnnpar-*.whl
python3 -m pip wheel -q --no-deps -w "$WHEELS" .
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$WHEELS" \
  "pymetis>=2023.1" "ogb>=1.3.6,<2" "outdated>=0.2" littleutils
ls -l "$WHEELS"
