#!/usr/bin/env bash
# Here (the build machine, which has PyPI): fetches by package name what the multi-GPU build and
# run need and neither Debian nor the GPU image provide, into .cache/gpu-deps/ (git-ignored):
#   nccl/          nccl.h and libnccl.so.2 from PyPI nvidia-nccl-cu13, to compile and link
#                  lib/transfer's NCCL backend here, only when the CUDA toolkit has no NCCL
#                  (this image's /usr/local/cuda ships one); the GPU machine has its own
#                  libnccl.so.2 in its PyTorch environment, which the binaries use there
#   ucx-cu13.tar.xz  the CUDA-enabled UCX runtime from PyPI libucx-cu13 (libucp/uct/ucs/ucm,
#                  the cuda and cma transport modules, ucx_perftest and ucx_info): carried to
#                  the GPU machine, where it replaces Debian's CPU-only UCX for the multi-GPU run
# Our code compiles against Debian's UCX headers (CI), and runs against either library (UCX
# keeps its ABI within 1.x: every parameter struct is guarded by a field mask).
# Usage: bash scripts/device/fetch_gpu_deps.sh   (idempotent; 43 MB download, +305 MB for NCCL)
set -euo pipefail
cd "$(dirname "$0")/../.."
NCCL_VERSION=2.32.3
UCX_VERSION=1.22.0
DEST=.cache/gpu-deps
WHEELS=$DEST/wheels
mkdir -p "$WHEELS"
have() { compgen -G "$WHEELS/$1" > /dev/null; }
have "libucx_cu13-$UCX_VERSION-*.whl" ||
  python3 -m pip download --no-deps -d "$WHEELS" "libucx-cu13==$UCX_VERSION"
rm -rf "$DEST/unpack" && mkdir -p "$DEST/unpack"

if [ ! -f /usr/local/cuda/include/nccl.h ] && [ ! -f "$DEST/nccl/include/nccl.h" ]; then
  have "nvidia_nccl_cu13-$NCCL_VERSION-*.whl" ||
    python3 -m pip download --no-deps -d "$WHEELS" "nvidia-nccl-cu13==$NCCL_VERSION"
  mkdir -p "$DEST/nccl/lib"
  python3 -m zipfile -e "$WHEELS"/nvidia_nccl_cu13-"$NCCL_VERSION"-*.whl "$DEST/unpack/nccl"
  mv "$DEST/unpack/nccl/nvidia/nccl/include" "$DEST/nccl/include"
  mv "$DEST/unpack/nccl/nvidia/nccl/lib/libnccl.so.2" "$DEST/nccl/lib/"
  ln -sf libnccl.so.2 "$DEST/nccl/lib/libnccl.so"
  echo "NCCL $NCCL_VERSION headers + library in $DEST/nccl (configure picks them up)"
fi

# UCX: only the sonamed libraries (zip has no symlinks, so the wheel holds three copies each),
# the transport modules next to them (UCX finds modules in <libucs dir>/ucx), and two tools.
python3 -m zipfile -e "$WHEELS"/libucx_cu13-"$UCX_VERSION"-*.whl "$DEST/unpack/ucx"
U=$DEST/unpack/ucx
mkdir -p "$DEST/unpack/pack/ucx-cu13/lib/ucx" "$DEST/unpack/pack/ucx-cu13/bin" \
  "$DEST/unpack/pack/libucx_cu13.libs"
cp "$U"/libucx/lib/lib*.so.0 "$DEST/unpack/pack/ucx-cu13/lib/"
cp "$U"/libucx/lib/ucx/lib*.so.0 "$DEST/unpack/pack/ucx-cu13/lib/ucx/"
cp "$U"/libucx/bin/ucx_perftest "$U"/libucx/bin/ucx_info "$DEST/unpack/pack/ucx-cu13/bin/"
chmod +x "$DEST/unpack/pack/ucx-cu13/bin/"*
# ucx_perftest finds libgomp through $ORIGIN/../../libucx_cu13.libs.
cp "$U"/libucx_cu13.libs/* "$DEST/unpack/pack/libucx_cu13.libs/"
tar -C "$DEST/unpack/pack" -cJf "$DEST/ucx-cu13.tar.xz" ucx-cu13 libucx_cu13.libs
rm -rf "$DEST/unpack"
echo "UCX $UCX_VERSION (CUDA) runtime: $DEST/ucx-cu13.tar.xz ($(du -h "$DEST/ucx-cu13.tar.xz" | cut -f1))"
