#!/usr/bin/env bash
# cuobjdump and nvdisasm for reading SASS on a machine without the full CUDA toolkit (the dev VM's
# CUDA has nvcc but not these), from their PyPI packages, into .cache/sass-tools. Prints the PATH
# to use; bench/kernels/sass_scoreboards.py needs both. The GPU machine's toolkit has them.
#   bash scripts/fetch_sass_tools.sh && export PATH="$(bash scripts/fetch_sass_tools.sh --path):$PATH"
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.cache/sass-tools
bin=$dir/nvidia/cu13/bin
if [ "${1:-}" = --path ]; then
  echo "$PWD/$bin"
  exit 0
fi
if [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ]; then
  mkdir -p "$dir/wheels"
  python3 -m pip download --no-deps --quiet -d "$dir/wheels" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
  for whl in "$dir"/wheels/*.whl; do python3 -m zipfile -e "$whl" "$dir"; done
  chmod +x "$bin"/*
fi
"$bin/cuobjdump" --version | tail -1
echo "add to PATH: $PWD/$bin"
