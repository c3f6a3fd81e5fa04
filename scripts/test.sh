#!/usr/bin/env bash
# The whole test suite: set-up (idempotent), build, then every ctest label that this machine
# can run. `gpu` tests run only where nvidia-smi sees a GPU (scripts/device/ runs them there).
#   bash scripts/test.sh [ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/setup.sh --after-build
BUILD=${OSCARKV_BUILD_DIR:-build}
exclude=()
if ! nvidia-smi -L >/dev/null 2>&1; then
  exclude=(-LE gpu)
  echo "[test] no GPU here: skipping tests labelled gpu"
fi
ctest --test-dir "$BUILD" --output-on-failure -j "${OSCARKV_JOBS:-2}" "${exclude[@]}" "$@"
