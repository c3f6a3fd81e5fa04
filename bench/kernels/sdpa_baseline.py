"""BF16 decode baselines on the GPU: PyTorch scaled_dot_product_attention (cuDNN and flash
backends) on the decode shapes of bench/kernels/RESULTS.md, plus a device-to-device copy probe.

Each case: q [B, Hq, 1, D], k/v [B, Hkv, S, D] bf16 (GQA through enable_gqa), as many input copies
as make one timed graph read > 4x the L2, a CUDA graph of one call per copy, median replay time
divided by the copies.
    python3 bench/kernels/sdpa_baseline.py [--quick]
"""
import math
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

SHAPES = [(32, 8, 128), (9, 3, 64)]
BATCHES = [1, 8, 32]
CONTEXTS = [8192, 32768, 131072]


def time_intervals_us(run, reps):
    """Median over reps of 10 run() calls back to back between two events, in us per call (after
    3 untimed calls), as decode_attention_bench does: one call per event pair from an idle GPU
    also timed the launch (cuDNN +1.8...3.3% per call, session 22,
    bench/kernels/results/attn_v24/timing/)."""
    replays = 10
    for _ in range(3):
        run()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(replays):
            run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / replays)
    times.sort()
    return times[len(times) // 2] * 1000.0


def time_graph(fn, copies, reps=50):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return time_intervals_us(g.replay, reps) / copies


def copy_bandwidth():
    # Timed outside a graph: captured, the copy ran at 2.8 TB/s against 4.25 eagerly (session 22,
    # bench/kernels/results/attn_v24/copybw.log); decode_attention_bench takes the best of three.
    n = 2 << 30
    x = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
    y = torch.empty_like(x)
    return 2 * n / (time_intervals_us(lambda: y.copy_(x), 20) * 1e-6)


def main():
    quick = "--quick" in sys.argv
    bw = copy_bandwidth()
    print(f"torch copy bandwidth (read+write): {bw / 1e9:.1f} GB/s")
    for hq, hkv, d in SHAPES:
        for b in BATCHES:
            for s in CONTEXTS:
                if quick and not ((b == 1 and s == 131072) or (b == 32 and s == 8192)):
                    continue
                kv_bytes = 2 * b * hkv * s * d * 2
                copies = max(1, min(8, math.ceil(240e6 / kv_bytes)))
                qs = [torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
                ks = [torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
                vs = [torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
                floor_us = kv_bytes / bw * 1e6
                for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                                      ("flash", SDPBackend.FLASH_ATTENTION)):
                    def fn():
                        with sdpa_kernel(backend):
                            for i in range(copies):
                                F.scaled_dot_product_attention(qs[i], ks[i], vs[i], enable_gqa=True)
                    try:
                        us = time_graph(fn, copies)
                        print(f"sdpa {name:5s} Hq={hq:2d} Hkv={hkv} D={d:3d} B={b:2d} S={s:6d}  "
                              f"{us:8.2f} us  {kv_bytes / (us * 1e-6) / 1e9:7.1f} GB/s  "
                              f"floor {floor_us:7.2f} us", flush=True)
                    except Exception as e:  # a backend may reject a shape: say so, go on
                        print(f"sdpa {name:5s} Hq={hq:2d} Hkv={hkv} D={d:3d} B={b:2d} S={s:6d}  "
                              f"FAILED: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
                del qs, ks, vs
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
