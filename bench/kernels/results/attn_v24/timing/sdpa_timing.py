# Scratch: cuDNN SDPA per-call time, one replay per event pair vs an untimed replay first vs 10
# replays per event pair (the same graph).
import math, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
def run(hq, hkv, d, b, s):
    kv_bytes = 2 * b * hkv * s * d * 2
    copies = max(1, min(8, math.ceil(240e6 / kv_bytes)))
    qs = [torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    ks = [torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    vs = [torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    def fn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for i in range(copies):
                F.scaled_dot_product_attention(qs[i], ks[i], vs[i], enable_gqa=True)
    st = torch.cuda.Stream(); st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(st)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): fn()
    for _ in range(3): g.replay()
    out = []
    for mode in ("each", "busy1", "busy10"):
        ts = []
        for _ in range(50):
            a = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
            if mode == "busy1": g.replay()
            a.record()
            n = 10 if mode == "busy10" else 1
            for _ in range(n): g.replay()
            e.record(); e.synchronize()
            ts.append(a.elapsed_time(e) / n)
        ts.sort()
        out.append(f"{mode} {ts[25] * 1000 / copies:8.2f}")
    print(f"cudnn Hq={hq} Hkv={hkv} D={d} B={b} S={s} copies={copies}: " + "  ".join(out), flush=True)
for args in ((32, 8, 128, 1, 131072), (32, 8, 128, 32, 8192), (9, 3, 64, 1, 131072), (9, 3, 64, 32, 8192)):
    run(*args)
