#!/usr/bin/env bash
# The main job on the embedded default: set up (idempotent), build, then run oscarkv on the real
# default model. While the services are being built this demonstrates the codecs on real KV;
# once `oscarkv serve` exists it starts the all-in-one server (router on --port, default 8000).
#   bash scripts/run.sh [args passed to the command]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/setup.sh --after-build
BIN=${OSCARKV_BUILD_DIR:-build}/tools/oscarkv
if "$BIN" serve --help >/dev/null 2>&1; then
  exec "$BIN" serve "$@"
fi
if "$BIN" generate --help >/dev/null 2>&1; then
  "$BIN" generate --model default --prompt "The three tiers of a KV cache are" --max-tokens 48
fi
if "$BIN" codecs --help >/dev/null 2>&1; then
  exec "$BIN" codecs report "$@"
fi
exec "$BIN" --help
