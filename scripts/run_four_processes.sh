#!/usr/bin/env bash
# Starts the four-process topology on loopback (docs/TOPOLOGIES.md): the router
# (`oscarkv serve --router_only`, the OpenAI HTTP API and the worker registry), then
# oscarkv_kvstore, oscarkv_prefill, oscarkv_decode (KV blocks between them over UCX), which
# register with the router (--router_address) and heartbeat. Waits until each is ready and the
# router has a prefill and a decode worker, prints the URL, and stops all four (SIGTERM, drain)
# when this script exits (Ctrl-C). GPU workers: --prefill-device cuda:0 --decode-device cuda:1
# (docs/TOPOLOGIES.md "GPU workers"; needs a CUDA build).
#
#   bash scripts/run_four_processes.sh [--port 8000] [--codec oscar] [--calibration FILE]
#        [--model default] [--build build | --bin-dir DIR] [--prefill-device cpu|cuda:N]
#        [--decode-device cpu|cuda:N] [--gpu-prefill chunked|one_pass] [--worker-args "ARGS"]
# --worker-args: more flags for the prefill and decode workers, e.g. GPU-to-GPU KV handoff with a
# CUDA UCX: "--ucx_transports tcp,self,sm,cuda_copy,cuda_ipc --ucx_peer_failure_detection false"
# (docs/TOPOLOGIES.md §3).
# --bin-dir: the four binaries (oscarkv, oscarkv_kvstore, oscarkv_prefill, oscarkv_decode) in one
# folder instead of a build tree (scripts/device/stage_model.sh ships them so).
# Logs: $LOG_DIR (default /tmp/oscarkv-four) /{kvstore,prefill,decode,router}.log
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=8000; CODEC=oscar; CALIB=""; MODEL=default; BUILD=${OSCARKV_BUILD_DIR:-build}; BIN_DIR=""
PREFILL_DEVICE=cpu; DECODE_DEVICE=cpu; GPU_PREFILL=chunked; WORKER_ARGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --port) PORT=$2; shift 2 ;;
    --codec) CODEC=$2; shift 2 ;;
    --calibration) CALIB=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --bin-dir) BIN_DIR=$2; shift 2 ;;
    --prefill-device) PREFILL_DEVICE=$2; shift 2 ;;
    --decode-device) DECODE_DEVICE=$2; shift 2 ;;
    --gpu-prefill) GPU_PREFILL=$2; shift 2 ;;
    --worker-args) WORKER_ARGS=$2; shift 2 ;;
    -h|--help) sed -n 2,18p "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
LOG_DIR=${LOG_DIR:-/tmp/oscarkv-four}
mkdir -p "$LOG_DIR"
KV_GRPC=50061; KV_METRICS=9461; PF_GRPC=50081; PF_METRICS=9481; DC_GRPC=50071; DC_METRICS=9471
RT_GRPC=${RT_GRPC:-9000}
KVSTORE=$BUILD/services/kvstore/oscarkv_kvstore; PREFILL=$BUILD/services/prefill/oscarkv_prefill
DECODE=$BUILD/services/decode/oscarkv_decode; OSCARKV=$BUILD/tools/oscarkv
if [ -n "$BIN_DIR" ]; then
  KVSTORE=$BIN_DIR/oscarkv_kvstore; PREFILL=$BIN_DIR/oscarkv_prefill
  DECODE=$BIN_DIR/oscarkv_decode; OSCARKV=$BIN_DIR/oscarkv
fi
for b in "$KVSTORE" "$PREFILL" "$DECODE" "$OSCARKV"; do
  [ -x "$b" ] || { echo "missing $b: build first (bash scripts/build.sh)" >&2; exit 1; }
done
worker_flags=(--model "$MODEL" --codec "$CODEC" --transfer_backend ucx --metrics_host 127.0.0.1
              --router_address 127.0.0.1:$RT_GRPC)
[ -n "$CALIB" ] && worker_flags+=(--calibration "$CALIB")
# shellcheck disable=SC2206  # word splitting intended
[ -n "$WORKER_ARGS" ] && worker_flags+=($WORKER_ARGS)

pids=()
cleanup() {
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  echo "stopped (logs in $LOG_DIR)"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_ready() {  # name url
  for _ in $(seq 1 240); do
    if curl -fsS "$2" >/dev/null 2>&1; then echo "$1 ready"; return 0; fi
    sleep 0.5
  done
  echo "$1 did not become ready; see $LOG_DIR/$1.log" >&2; exit 1
}

router_flags=(serve --router_only --router_grpc_address 127.0.0.1:$RT_GRPC --host 127.0.0.1
              --port "$PORT" --model "$MODEL" --codec "$CODEC")
[ -n "$CALIB" ] && router_flags+=(--calibration "$CALIB")
"$OSCARKV" "${router_flags[@]}" >"$LOG_DIR/router.log" 2>&1 &
pids+=($!)
"$KVSTORE" --grpc_address 127.0.0.1:$KV_GRPC \
  --metrics_host 127.0.0.1 --metrics_port $KV_METRICS --router_address 127.0.0.1:$RT_GRPC \
  >"$LOG_DIR/kvstore.log" 2>&1 &
pids+=($!)
wait_ready kvstore http://127.0.0.1:$KV_METRICS/readyz
"$PREFILL" --grpc_address 127.0.0.1:$PF_GRPC --device "$PREFILL_DEVICE" --gpu_prefill "$GPU_PREFILL" \
  --metrics_port $PF_METRICS --kvstore_address 127.0.0.1:$KV_GRPC "${worker_flags[@]}" \
  >"$LOG_DIR/prefill.log" 2>&1 &
pids+=($!)
"$DECODE" --grpc_address 127.0.0.1:$DC_GRPC --device "$DECODE_DEVICE" \
  --metrics_port $DC_METRICS "${worker_flags[@]}" >"$LOG_DIR/decode.log" 2>&1 &
pids+=($!)
wait_ready prefill http://127.0.0.1:$PF_METRICS/readyz
wait_ready decode http://127.0.0.1:$DC_METRICS/readyz
# Ready once a prefill and a decode worker have registered and heartbeated.
wait_ready router http://127.0.0.1:$PORT/readyz
echo "oscarkv (four processes) ready at http://127.0.0.1:$PORT/v1"
echo "  metrics: kvstore :$KV_METRICS  prefill :$PF_METRICS  decode :$DC_METRICS  router :$PORT"
echo "  worker registry (gRPC): 127.0.0.1:$RT_GRPC"
echo "Ctrl-C stops all four."
wait "${pids[0]}"
