"""BF16 causal prefill baselines on the GPU: PyTorch scaled_dot_product_attention with the cuDNN
and flash backends on prefill_attention_bench's shapes (one prompt of T tokens, GQA through
enable_gqa), timed as that bench times ours: 3 warm-up calls, then the median of 20 calls between
CUDA events; TFLOP/s with the same causal count 2 * 2 * T * T / 2 * D * Hq.
    python3 bench/kernels/prefill_sdpa_baseline.py [--quick]   (--quick: T = 8192 only)
"""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

SHAPES = [(32, 8, 128), (9, 3, 64)]
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]


def median_ms(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    quick = "--quick" in sys.argv[1:]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}")
    for t in [8192] if quick else [8192, 32768]:
        for hq, hkv, d in SHAPES:
            gen = torch.Generator(device="cuda").manual_seed(1234)
            q = torch.rand(1, hq, t, d, device="cuda", generator=gen).mul_(4).sub_(2).bfloat16()
            k = torch.rand(1, hkv, t, d, device="cuda", generator=gen).mul_(4).sub_(2).bfloat16()
            v = torch.rand(1, hkv, t, d, device="cuda", generator=gen).mul_(4).sub_(2).bfloat16()
            flops = 2.0 * 2.0 * t * t / 2.0 * d * hq
            for name, backend in BACKENDS:
                try:
                    with sdpa_kernel(backend):
                        def run():
                            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                        ms = median_ms(run)
                    print(f"sdpa_{name:5s} T={t:<6d} Hq={hq:<2d} Hkv={hkv:<2d} D={d:<3d} "
                          f"median {ms:9.3f} ms  {flops / (ms * 1e-3) / 1e12:7.1f} TFLOP/s")
                except RuntimeError as e:  # a backend that does not take this shape
                    print(f"sdpa_{name:5s} T={t:<6d} Hq={hq:<2d} Hkv={hkv:<2d} D={d:<3d} "
                          f"unavailable: {str(e).splitlines()[0][:120]}")


if __name__ == "__main__":
    main()
