# Sourced by the device scripts (check.sh, prefill.sh, profile.sh): records the GPU's clocks in
# $OUT/gpu.txt and builds kernels/ standalone (-DOSCARKV_KERNELS_ONLY=ON) with the GPU machine's
# nvcc into build-dev, log in $OUT/build.log. Exits the script on a failed build.
#   build_kernels [TARGET...]   (no target: everything)
build_kernels() {
  local targets=()
  [ $# -gt 0 ] && targets=(--target "$@")
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv | tee "$OUT/gpu.txt"
  cmake -S . -B build-dev -G Ninja -DOSCARKV_KERNELS_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
    > "$OUT/build.log" 2>&1 && cmake --build build-dev -j16 "${targets[@]}" >> "$OUT/build.log" 2>&1 \
    || { echo "BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1; }
}
