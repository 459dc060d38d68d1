#!/usr/bin/env bash
# One command for every benchmark (see benchmarks/README.md). Installs the benchmark-only
# packages (torch CPU, threadpoolctl) into .venv if missing, unsets OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE (they slow a current numpy; tests and CI leave them alone), writes the MNIST
# sample if ./datasets lacks it, then runs benchmarks/run.py with the given arguments.
# `--backend gpu`: distnet on distnet.backends.GPU (cupy) and PyTorch on cuda; without cupy or a
# GPU it stops first, with one line and exit 1, before installing anything.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="$root/.venv/bin/python"
if [ ! -x "$py" ]; then py="$("$root/bin/bootstrap")/bin/python"; fi
"$py" "$root/benchmarks/run.py" --preflight "$@"
"$py" -c "import torch" 2>/dev/null || "$py" -m pip install -q "torch==2.13.0"
"$py" -c "import threadpoolctl" 2>/dev/null || "$py" -m pip install -q threadpoolctl
[ -x "$root/.venv/bin/py-spy" ] || "$py" -m pip install -q py-spy || true
[ -f datasets/MNIST/train-images-idx3-ubyte ] || "$py" -m distnet data mnist-sample datasets
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
exec "$py" "$root/benchmarks/run.py" "$@"
