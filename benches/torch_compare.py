"""torch eager and torch.compile on the benchmark shapes, for side-by-side numbers.

Run on the GPU machine (its python has torch and triton):
    python3 benches/torch_compare.py --out DIR [--quick]      # [T, C] rows -> DIR/torch.csv
    python3 benches/torch_compare.py --out DIR --c 1024 --t 99840,399360   # those rows only
    python3 benches/torch_compare.py --out DIR --channels     # Wan [B, C, T, H, W] -> DIR/torch_channels.csv
    python3 benches/torch_compare.py --out DIR --backward     # dx, dgamma of [T, C] -> DIR/torch_backward.csv
    python3 benches/torch_compare.py --out DIR --copies       # copy roofs of [T, C] bf16 -> DIR/torch_copies.csv
torch.csv: c,t,eager_us,compile_us,torch_copy_us; torch_channels.csv: shape,layout,eager_us,
compile_us,torch_copy_us (medians from triton.testing.do_bench, which flushes the L2 between
runs; bf16 in and out). The channel-axis op is the Wan VAE's own chain,
F.normalize(x, dim=1) * sqrt(C) * gamma then SiLU, in both memory formats.
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


def wan_norm_silu(x, gamma):
    c = x.shape[1]
    y = torch.nn.functional.normalize(x.float(), dim=1) * (c ** 0.5) * gamma.float().view(1, c, 1, 1, 1)
    return torch.nn.functional.silu(y).to(x.dtype)


def channels(out_dir):
    rows = []
    for shape in [(1, 96, 4, 480, 832), (1, 192, 4, 240, 416), (1, 384, 1, 60, 104)]:
        for layout in ["channels_first", "channels_last"]:
            x = (torch.randn(*shape, device="cuda") * 5 + 5).to(torch.bfloat16)
            if layout == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last_3d)
            gamma = (torch.rand(shape[1], device="cuda") * 1.5 + 0.5).to(torch.bfloat16)
            out = torch.empty_like(x)
            eager = bench(lambda: wan_norm_silu(x, gamma))
            torch._dynamo.reset()
            compiled = torch.compile(wan_norm_silu, dynamic=False)
            compiled(x, gamma)
            comp = bench(lambda: compiled(x, gamma))
            copy = bench(lambda: out.copy_(x))
            name = "x".join(str(d) for d in shape)
            rows.append([name, layout, f"{eager:.2f}", f"{comp:.2f}", f"{copy:.2f}"])
            print(f"{name} {layout:>15}: eager {eager:9.2f} us  compile {comp:9.2f} us  copy {copy:9.2f} us", flush=True)
            with open(os.path.join(out_dir, "torch_channels.csv"), "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["shape", "layout", "eager_us", "compile_us", "torch_copy_us"])
                w.writerows(rows)


def backward(out_dir):
    """Eager autograd and torch.compile'd autograd of the op over the last axis (dx and dgamma for
    an upstream gradient dy), on the shapes of `cargo bench --bench rmsnorm -- backward`."""
    rows = []

    def step(fn, x, gamma, dy):
        x.grad = None
        gamma.grad = None
        y = fn(x, gamma, 1e-6 / x.shape[-1])
        y.backward(dy)

    for c in [96, 192, 384, 1024]:
        for t in [24960, 99840, 399360]:
            x = (torch.randn(t, c, device="cuda") * 5 + 5).to(torch.bfloat16).requires_grad_()
            gamma = (torch.rand(c, device="cuda") * 1.5 + 0.5).to(torch.bfloat16).requires_grad_()
            dy = torch.randn(t, c, device="cuda").to(torch.bfloat16)
            eager = bench(lambda: step(rms_norm_silu, x, gamma, dy))
            torch._dynamo.reset()
            compiled = torch.compile(rms_norm_silu, dynamic=False)
            step(compiled, x, gamma, dy)
            comp = bench(lambda: step(compiled, x, gamma, dy))
            src = torch.empty(t * c * 3, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            copy = bench(lambda: dst.copy_(src))
            rows.append([c, t, f"{eager:.2f}", f"{comp:.2f}", f"{copy:.2f}"])
            print(f"backward C={c:5} T={t:7}: eager {eager:9.2f} us  compile {comp:9.2f} us  copy {copy:9.2f} us", flush=True)
            with open(os.path.join(out_dir, "torch_backward.csv"), "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["c", "t", "eager_fwd_bwd_us", "compile_fwd_bwd_us", "torch_copy_us"])
                w.writerows(rows)


def copies(out_dir):
    """The copy roof as torch and Triton reach it, beside `cargo bench ... -- copies`: torch's
    `copy_` (a driver memcpy for contiguous same-dtype tensors) and a Triton copy kernel of
    BLOCK elements per program (one program per block, as inductor launches them), same bytes."""
    import triton
    import triton.language as tl

    @triton.jit
    def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)

    rows = []
    for c in [512, 1024]:
        for t in [24960, 99840, 399360]:
            n = t * c
            x = torch.randn(n, device="cuda").to(torch.bfloat16)
            out = torch.empty_like(x)
            rows.append([c, t, "torch_copy", "", f"{bench(lambda: out.copy_(x)):.2f}"])
            for block in [1024, 2048, 4096, 8192]:
                for warps in [4, 8]:
                    grid = (triton.cdiv(n, block),)
                    run = lambda: copy_kernel[grid](x, out, n, BLOCK=block, num_warps=warps)
                    run()
                    assert torch.equal(out, x)
                    rows.append([c, t, f"triton_b{block}", warps, f"{bench(run):.2f}"])
            for r in rows[-9:]:
                print(f"copies C={c:5} T={t:7}: {r[2]:>14} warps {r[3]!s:>2} {r[4]:>9} us", flush=True)
            with open(os.path.join(out_dir, "torch_copies.csv"), "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["c", "t", "copy", "num_warps", "us"])
                w.writerows(rows)
    kernel = copy_kernel[(1,)](x, out, 1024, BLOCK=4096, num_warps=4)
    with open(os.path.join(out_dir, "triton_copy.ptx"), "w") as f:
        f.write(kernel.asm["ptx"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="target/bench")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--channels", action="store_true")
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--copies", action="store_true")
    ap.add_argument("--c", help="comma-separated C of the rows table (default: all)")
    ap.add_argument("--t", help="comma-separated T of the rows table (default: all)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.backward:
        backward(args.out)
        return
    if args.copies:
        copies(args.out)
        return
    if args.channels:
        channels(args.out)
        return
    rows = []
    tokens = TOKENS[:2] if args.quick else TOKENS
    channels_list = CHANNELS
    if args.c:
        channels_list = [int(v) for v in args.c.split(",")]
    if args.t:
        tokens = [int(v) for v in args.t.split(",")]
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for c in channels_list:
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
