#!/usr/bin/env bash
# Configures and builds oscarkv into build/ (ccache when present, -j2 by default).
#   bash scripts/build.sh [extra cmake -D args]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${OSCARKV_BUILD_DIR:-build}
JOBS=${OSCARKV_JOBS:-2}
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
else
  # Re-configure every time (about a second): new folders join the build when they appear.
  cmake -S . -B "$BUILD" "$@" >/dev/null
fi
cmake --build "$BUILD" -j "$JOBS"
