#!/usr/bin/env bash
# On the GPU machine: end-to-end runs of lib/model_gpu with the real default model, staged by
# scripts/device/stage_model.sh in four back-to-back calls (ARCHITECTURE.md §7).
#   bash scripts/device/model.sh stage DIR          copy DIR's files to the scratch folder
#   bash scripts/device/model.sh run DIR [--skip-tests] [--bench] [--quality] [--clip] [--niah]
#        [--multigpu]   copy DIR's files, reassemble the model, check its sha256, unpack the
#        binaries; run the GPU-vs-CPU tests (model_gpu_test, model_kernels_gpu_test,
#        int2_dequant_gpu_test) and `oscarkv
#        generate --device cuda` (unless --skip-tests: a second run on a still-warm machine);
#        with --bench also the end-to-end benchmarks (--ttft: only the time to first token,
#        with the Hopper and the mma.sync prefill attention in the same run; --score: only the
#        cost of prompt scoring on the GPU, gpu_e2e_bench --mode score); with --quality
#        the true-decode quality grid (20 windows at 2k and 8k, held-out text); with --clip the
#        M5 calibration and the
#        clipping lever at 8k and greedy agreement (50 prompts x 128 tokens); with --niah the
#        needle in a haystack at 2k/4k/8k (5 depths x 3 trials, true decode); with --multigpu
#        (two GPUs) the prefill-GPU -> decode-GPU run of bench/multigpu over NCCL and the CUDA
#        UCX carried in stage2 (ucx-cu13.tar.xz); with --services the four-process topology
#        with GPU workers (scripts/run_four_processes.sh: prefill on GPU 0, decode on GPU 1, or
#        both on GPU 0 with one GPU), measured through the router by services_client.py and
#        for bf16 and oscar with the chunked GPU prefill (kvstore reuse checked) and oscar with
#        the one-pass GPU prefill (checked against `oscarkv generate --device cuda`), each also
#        scoring a prompt (echo + logprobs; one-pass workers score through their chunked
#        prefill); SVC_RUNS picks codec:mode runs, mode one of chunked, one_pass,
#        one_pass_direct (KV GPU to GPU over UCX cuda_ipc), one_pass_host (same UCX, handoff
#        off); SVC_TEMPERATURES (default 0) runs the client once per temperature on each
#        (temperature > 0: sampled with a seed; labels get _t<T>), and with SVC_BATCH=NxM also
#        batch_client.py (N concurrent M-token completions); SVC_BIN replaces the folder
#        of the four service binaries (a before/after with another build's); SVC_PREFILL_DEVICE
#        and SVC_DECODE_DEVICE (cpu or cuda:N) override the workers' devices, for a mixed fleet
#        (the one_pass `matches generate` check is then left out); with --cpu-eval the CPU
#        emulation `oscarkv eval` on this machine's cores ((window, codec) forwards in parallel,
#        --jobs = nproc): CPU_EVAL_CODECS (required), CPU_EVAL_CONTEXT (8192), CPU_EVAL_WINDOWS
#        (20), CPU_EVAL_LIMIT (560 s; results.json is rewritten after every finished window, so
#        a run cut off keeps those), results in $OUT/cpu_eval. Costly: at 8k one (window, codec)
#        forward took ~330 s with 20 in parallel on the x2's 32 cores (session 6: nothing
#        finished in a 565 s call), so use it for 2k/4k or few windows. Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/device}
mkdir -p "$OUT"
SCRATCH=${TMPDIR:-/tmp}/oscarkv-stage
mkdir -p "$SCRATCH"
cmd=${1:?stage|run}; dir=${2:?folder}
cp "$dir"/* "$SCRATCH"/
[ "$cmd" = stage ] && { ls -la "$SCRATCH"; exit 0; }

cat "$SCRATCH"/model.part1 "$SCRATCH"/model.part2 "$SCRATCH"/model.part3 > "$SCRATCH"/model.gguf
if [ "$(sha256sum "$SCRATCH"/model.gguf | cut -d' ' -f1)" != "$(cat "$SCRATCH"/model.sha256)" ]; then
  echo "model sha256 mismatch: stage again" >&2; exit 1
fi
tar -C "$SCRATCH" -xJf "$SCRATCH"/bins.tar.xz
mkdir -p data/calibration && cp "$SCRATCH"/smollm2-135m-oscar*.cal data/calibration/
cublas=$(dirname "$(find / -name 'libcublas.so.13*' -not -path '*/proc/*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$SCRATCH/lib:$cublas:${LD_LIBRARY_PATH:-}"
export OSCARKV_DEFAULT_MODEL="$SCRATCH/model.gguf"
BIN="$SCRATCH/bin"
status=0
bench=0; ttft=0; score=0; quality=0; clip=0; niah=0; multigpu=0; services=0; cpu_eval=0; tests=1
for a in "${@:3}"; do
  case "$a" in --bench) bench=1 ;; --ttft) ttft=1 ;; --score) score=1 ;;
    --quality) quality=1 ;; --clip) clip=1 ;; --niah) niah=1 ;;
    --multigpu) multigpu=1 ;; --services) services=1 ;; --cpu-eval) cpu_eval=1 ;;
    --skip-tests) tests=0 ;;
    *) echo "unknown $a" >&2; exit 2 ;; esac
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv | tee "$OUT/gpu.txt"
if [ $tests = 1 ]; then
  echo "== GPU vs CPU tests"
  for t in model_gpu_test model_kernels_gpu_test int2_dequant_gpu_test; do
    "$BIN"/$t 2>&1 | tee "$OUT/$t.log" | grep -vE '^\[ +(RUN|OK) |^PASS ' || status=1
    grep -qE "FAILED|^FAIL" "$OUT/$t.log" && status=1
  done
  echo "== generate --device cuda"
  for codec in bf16 oscar; do
    "$BIN"/oscarkv generate --device cuda --codec "$codec" --max-tokens 48 \
      --prompt "The three most important things to know about the ocean are" 2>&1 \
      | tee "$OUT/generate_$codec.log" || status=1
  done
fi
# NVLink multicast stays off on these shared hosts (device README); the bench forces it too.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ $multigpu = 1 ] || [ $services = 1 ]; then
  nccl=$(dirname "$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)")
  tar -C "$SCRATCH" -xJf "$SCRATCH"/ucx-cu13.tar.xz
  # The PyPI UCX (with its transport modules) goes first: it replaces the carried Debian libucp.
  MG_LIBS="$SCRATCH/ucx-cu13/lib:$nccl:$LD_LIBRARY_PATH"
fi
if [ $services = 1 ]; then
  ngpu=$(nvidia-smi -L | wc -l)
  dec=cuda:1; [ "$ngpu" -lt 2 ] && dec=cuda:0
  dec=${SVC_DECODE_DEVICE:-$dec}; pre=${SVC_PREFILL_DEVICE:-cuda:0}
  # codec:mode pairs; chunked prefill shares the kvstore (the streamed repeat reuses the stored
  # prefix), one_pass matches `oscarkv generate --device cuda` token for token. one_pass_direct:
  # the prompt's KV goes GPU to GPU in packed form (--gpu_direct_kv over UCX cuda_ipc);
  # one_pass_host: the same UCX transports with the handoff off (blocks through host memory).
  cuda_ucx="--ucx_transports tcp,self,sm,cuda_copy,cuda_ipc --ucx_peer_failure_detection false"
  for run in ${SVC_RUNS:-bf16:chunked oscar:chunked oscar:one_pass}; do
    codec=${run%%:*}; mode=${run##*:}; name="${codec}_$mode"
    gpu_prefill=chunked; [[ $mode == one_pass* ]] && gpu_prefill=one_pass
    wargs=""
    [[ $mode == *_direct ]] && wargs="$cuda_ucx --gpu_direct_kv true"
    [[ $mode == *_host ]] && wargs="$cuda_ucx --gpu_direct_kv false"
    # --model default = $OSCARKV_DEFAULT_MODEL (the reassembled checkpoint), with its calibration.
    echo "== services: router + kvstore (host), prefill $pre ($mode), decode $dec, codec $codec"
    LOG_DIR="$OUT/services_$name" LD_LIBRARY_PATH="$MG_LIBS" timeout 400 \
      bash scripts/run_four_processes.sh --bin-dir "${SVC_BIN:-$BIN}" --worker-args "$wargs" \
      --codec "$codec" --prefill-device "$pre" --decode-device "$dec" --gpu-prefill "$gpu_prefill" \
      > "$OUT/services_$name.log" 2>&1 &
    svc=$!
    for _ in $(seq 1 240); do
      grep -q "ready at" "$OUT/services_$name.log" 2>/dev/null && break
      kill -0 $svc 2>/dev/null || break; sleep 0.5
    done
    cat "$OUT/services_$name.log"
    check=(--score)
    [[ $gpu_prefill == one_pass && $pre == cuda:* && $dec == cuda:* ]] &&
      check=(--score --generate "$BIN/oscarkv generate --device cuda --codec $codec")
    if grep -q "ready at" "$OUT/services_$name.log"; then
      for temp in ${SVC_TEMPERATURES:-0}; do
        label=$name; [ "$temp" = 0 ] || label="${name}_t$temp"
        LD_LIBRARY_PATH="$MG_LIBS" timeout 300 python3 scripts/device/services_client.py \
          --text "$SCRATCH/mobydick.txt" --chars "${SVC_CHARS:-4000,16000,30000}" \
          --temperature "$temp" --label "$label" --out "$OUT/services.jsonl" "${check[@]}" \
          2>&1 | tee "$OUT/services_client_$label.log" || status=1
        if [ -n "${SVC_BATCH:-}" ]; then  # N concurrent requests of M tokens: "NxM"
          LD_LIBRARY_PATH="$MG_LIBS" timeout 300 python3 scripts/device/batch_client.py \
            --text "$SCRATCH/mobydick.txt" --requests "${SVC_BATCH%%x*}" \
            --max-tokens "${SVC_BATCH##*x}" --temperature "$temp" --label "$label" \
            --out "$OUT/batch.jsonl" 2>&1 | tee -a "$OUT/batch_client.log" || status=1
        fi
      done
    else
      status=1
    fi
    kill -TERM $svc 2>/dev/null; wait $svc 2>/dev/null
    tail -n 5 "$OUT/services_$name"/*.log
  done
fi
if [ $multigpu = 1 ]; then
  echo "== GPU topology"; nvidia-smi topo -m 2>&1 | tee "$OUT/topo.txt"
  echo "== UCX"; LD_LIBRARY_PATH="$MG_LIBS" "$SCRATCH"/ucx-cu13/bin/ucx_info -v 2>&1 | head -3
  LD_LIBRARY_PATH="$MG_LIBS" "$SCRATCH"/ucx-cu13/bin/ucx_info -d 2>&1 \
    | grep -E "Memory domain|Transport:" | tr -s ' ' | paste -sd' ' | head -c 2000; echo
  M="$BIN"/multigpu_bench
  # Each run is bounded (MG_TIMEOUT s), so one stuck transport cannot take the others' device
  # time; MG_RUNS picks runs by name (a later call on a warm machine can finish the rest).
  mg() {
    local name=$1; shift
    case " ${MG_RUNS:-peer default_nccl default_ucx 8b} " in *" $name "*) ;; *) return 0 ;; esac
    echo "== multigpu $name"
    local limit=${MG_TIMEOUT:-240}
    LD_LIBRARY_PATH="$MG_LIBS" NCCL_DEBUG=WARN timeout $((limit + 10)) $M --timeout-s "$limit" \
      "$@" 2>&1 | tee "$OUT/multigpu_$name.log" || status=1
  }
  mg peer --mode peer
  T="$SCRATCH/mobydick.txt"
  mg default_nccl --config default --codecs bf16,oscar --contexts 2048,8192 --text "$T" \
    --transports nccl
  mg default_ucx --config default --codecs bf16,oscar --contexts 2048,8192 --text "$T" \
    --transports ucx
  mg 8b --config qwen3-8b-like --codecs bf16,oscar --contexts 8192,32768,131072 \
    --prefill-max 32768 --no-sweep --transports "${MG_8B_TRANSPORTS:-nccl,ucx}"
fi
if [ $cpu_eval = 1 ]; then
  echo "== CPU emulation (oscarkv eval) on $(nproc) cores: ${CPU_EVAL_CODECS:?set CPU_EVAL_CODECS}"
  lscpu | grep -E 'Model name|^CPU\(s\)' | tee "$OUT/cpu.txt"
  timeout "${CPU_EVAL_LIMIT:-560}" "$BIN"/oscarkv eval --model default \
    --text "$SCRATCH/emma.txt" "$SCRATCH/persuasion.txt" "$SCRATCH/mobydick.txt" \
    --codecs "$CPU_EVAL_CODECS" --context "${CPU_EVAL_CONTEXT:-8192}" \
    --windows "${CPU_EVAL_WINDOWS:-20}" --jobs "$(nproc)" --fidelity-windows 0 --no-plots \
    --calibration data/calibration/smollm2-135m-oscar.cal,data/calibration/smollm2-135m-oscar-gram.cal \
    --out "$OUT/cpu_eval" 2> >(tr '\r' '\n' > "$OUT/cpu_eval.log") \
    || echo "cpu eval exited $? (124: cut off by CPU_EVAL_LIMIT)"
  grep -o '"windows": [0-9]*' "$OUT/cpu_eval/results.json" | sort | uniq -c
fi
if [ $quality = 1 ]; then
  echo "== quality (true decode on the GPU, held-out text)"
  OMP_NUM_THREADS=16 "$BIN"/gpu_e2e_bench --mode quality --config default \
    --text "$SCRATCH/emma.txt,$SCRATCH/persuasion.txt,$SCRATCH/mobydick.txt" \
    --codecs bf16,oscar,oscar-gram,oscar-hadamard,oscar-norot --contexts 2048,8192 --windows 20 \
    2>&1 | tee "$OUT/quality.log" || status=1
fi
if [ $clip = 1 ]; then
  # Time grows with codecs x windows x steps: 3 codecs x 20 windows at 8k were cut off at step
  # 7168 of 8192 after 540 s (session 4), and 2 codecs x 20 windows (one part) after 500 s at the
  # same step (session 5: ~545 s in all, 14.5 steps/s), so a part with 20 windows needs a call of
  # nearly the full 600 s on a warm machine; CLIP_WINDOWS=16 leaves a margin;
  # CLIP_PART=1..4 picks one per device call (default: all four and the greedy agreement,
  # ~30 minutes); CLIP_WINDOWS (default 20) windows per part.
  parts=(bf16,oscar-gram bf16,oscar@0.90/0.84 bf16,oscar@0.84/0.75 bf16,oscar-hadamard@0.90/0.84)
  for part in 1 2 3 4; do
    [ -n "${CLIP_PART:-}" ] && [ "$CLIP_PART" != "$part" ] && continue
    codecs=${parts[$((part - 1))]}
    echo "== quality: the clipping lever and M5 at 8k ($codecs)"
    OMP_NUM_THREADS=16 "$BIN"/gpu_e2e_bench --mode quality --config default \
      --text "$SCRATCH/emma.txt,$SCRATCH/persuasion.txt,$SCRATCH/mobydick.txt" \
      --codecs "$codecs" --contexts 8192 --windows "${CLIP_WINDOWS:-20}" 2>&1 \
      | tee "$OUT/quality_clip_$part.log" || status=1
  done
  # One part fills a call: the greedy agreement runs only with all four parts.
  if [ -z "${CLIP_PART:-}" ]; then
    echo "== greedy agreement: 50 prompts of 1024 tokens, 128 new tokens"
    "$BIN"/gpu_e2e_bench --mode greedy --config default --prompt 1024 --output 128 --windows 50 \
      --text "$SCRATCH/emma.txt,$SCRATCH/persuasion.txt,$SCRATCH/mobydick.txt" \
      --codecs bf16,oscar,oscar-hadamard,oscar-norot,oscar@0.90/0.84 2>&1 \
      | tee "$OUT/greedy.log" || status=1
  fi
fi
if [ $niah = 1 ]; then
  echo "== needle in a haystack (true decode on the GPU, held-out text)"
  "$BIN"/gpu_e2e_bench --mode niah --config default \
    --text "$SCRATCH/emma.txt,$SCRATCH/persuasion.txt,$SCRATCH/mobydick.txt" \
    --codecs bf16,oscar,oscar-hadamard,oscar@0.90/0.84 --contexts 2048,4096,8192 \
    --depths 10,30,50,70,90 --trials 3 2>&1 | tee "$OUT/niah.log" || status=1
fi
E="$BIN"/gpu_e2e_bench
if [ $bench = 1 ] || [ $ttft = 1 ]; then
  echo "== TTFT"; $E --mode ttft --contexts 8192,32768 2>&1 | tee "$OUT/ttft.log"
fi
if [ $bench = 1 ] || [ $score = 1 ]; then
  echo "== prompt scoring"
  $E --mode score --config default --codecs bf16,oscar --contexts 1024,4096 2>&1 \
    | tee "$OUT/score.log" || status=1
fi
if [ $bench = 1 ]; then
  # Latency: every codec with and without decode graphs, their steps interleaved in one process.
  echo "== latency"; $E --mode latency --decode-graphs both --steps 32 2>&1 | tee "$OUT/latency.log"
  echo "== latency (default model shape, real weights)"
  $E --mode latency --config default --decode-graphs both --contexts 8192,32768,131072 \
    --steps 64 2>&1 | tee "$OUT/latency_default.log"
  echo "== throughput"
  for g in on off; do $E --mode throughput --decode-graphs $g --steps 16 2>&1; done \
    | tee "$OUT/throughput.log"
fi
exit $status
