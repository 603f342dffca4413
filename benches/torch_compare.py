"""torch eager and torch.compile on the benchmark shapes, for side-by-side numbers.

Run on the GPU machine (its python has torch and triton):
    python3 benches/torch_compare.py --out DIR [--quick]
Writes DIR/torch.csv: c,t,eager_us,compile_us,torch_copy_us (medians from
triton.testing.do_bench, which flushes the L2 between runs; bf16 in and out).
"""
import argparse
import csv
import os

import torch
import triton.testing

CHANNELS = [64, 128, 160, 256, 320, 512, 640, 1024, 96, 192, 384]
TOKENS = [1560, 6240, 24960, 99840, 399360]


def rms_norm_silu(x, gamma, eps):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * gamma.float()
    return torch.nn.functional.silu(y).to(x.dtype)


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="target/bench")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    tokens = TOKENS[:2] if args.quick else TOKENS
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for c in CHANNELS:
        for t in tokens:
            x = (torch.randn(t, c, device="cuda") * 5 + 5).to(torch.bfloat16)
            gamma = (torch.rand(c, device="cuda") * 1.5 + 0.5).to(torch.bfloat16)
            out = torch.empty_like(x)
            eps = 1e-6 / c
            eager = bench(lambda: rms_norm_silu(x, gamma, eps))
            # A fresh static compile per shape: past dynamo's recompile limit (8) a reused
            # compiled function silently falls back to eager.
            torch._dynamo.reset()
            compiled = torch.compile(rms_norm_silu, dynamic=False)
            compiled(x, gamma, eps)
            comp = bench(lambda: compiled(x, gamma, eps))
            copy = bench(lambda: out.copy_(x))
            rows.append([c, t, f"{eager:.2f}", f"{comp:.2f}", f"{copy:.2f}"])
            print(f"C={c:5} T={t:7}: eager {eager:9.2f} us  compile {comp:9.2f} us  copy {copy:9.2f} us", flush=True)
            # Written after every shape, so an interrupted run keeps what it measured.
            with open(os.path.join(args.out, "torch.csv"), "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["c", "t", "eager_us", "compile_us", "torch_copy_us"])
                w.writerows(rows)


if __name__ == "__main__":
    main()
