#!/usr/bin/env bash
# The main job on the embedded default: set up (idempotent), build, calibrate, then run the
# all-in-one oscarkv server (router + prefill + decode + kvstore in one process, on CPU, with the
# real default model). The OpenAI API listens on --port (default 8000); arguments go to
# `oscarkv serve` (see `build/tools/oscarkv serve --help`).
#   bash scripts/run.sh [serve options]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/setup.sh --after-build
BIN=${OSCARKV_BUILD_DIR:-build}/tools/oscarkv
exec "$BIN" serve "$@"
