#!/usr/bin/env bash
# CPU that one idle oscarkv_kvstore with the UCX backend uses: its threads' run time from
# /proc/PID/task/*/schedstat over 10 s (ns-exact, unlike tick-sampled utime), and its wake-ups.
#   bash bench/transfer/idle_cpu.sh [path/to/oscarkv_kvstore]
# bench/transfer/RESULTS.md ("The UCX progress thread's idle back-off") has the numbers.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build/services/kvstore/oscarkv_kvstore}
"$BIN" --transfer_backend ucx --grpc_address 127.0.0.1:0 --metrics_port 0 \
  --capacity_bytes 16777216 >/tmp/oscarkv_idle_cpu.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
sleep 3
sample() { cat /proc/$pid/task/*/schedstat | awk '{s += $1; n += $3} END {print s, n}'; }
read -r ns0 wake0 < <(sample)
sleep 10
read -r ns1 wake1 < <(sample)
python3 -c "print(f'$BIN idle: {($ns1-$ns0)/1e8:.2f}% of a core, {($wake1-$wake0)/10:.0f} wake-ups/s')"
