"""PyTorch peers of the Wan decoder benchmarks, run on the GPU machine (diffusers travels as a
wheel: see the `wan` step of scripts/gpu-steps.sh).

  python3 scripts/wan_torch.py convs OUT_DIR
      each convolution of `benches/conv/` (same shapes, same order) in cuDNN, bf16: the
      default layout, and channels_last_3d with cudnn.benchmark; CUDA events, 3 warm-ups,
      median of 10, the L2 flushed before each run. Writes OUT_DIR/torch_convs.csv.
  python3 scripts/wan_torch.py prepare OUT_DIR T
      diffusers AutoencoderKLWan (its default: Wan2.1) with random weights (seed 0): writes
      the decoder's weights (diffusers names, f32) and a latent [1, 16, T, 60, 104] (seed T)
      for the Rust decoder, and the f32 decode of that latent as the quality reference.
  python3 scripts/wan_torch.py decode OUT_DIR T
      times diffusers' bf16 decode of the same latent, eager and channels_last_3d +
      cudnn.benchmark (1 warm-up, median of 3), with the peak memory PyTorch allocated, and
      the PSNR of each bf16 video against the f32 one.
  python3 scripts/wan_torch.py psnr OUT_DIR T FILE
      the PSNR of the video in FILE (the Rust decoder's `--save`) against the f32 reference.
"""

import csv
import sys
import time

import torch
import torch.nn.functional as F

# (what, c_in, c_out, kernel, input T H W, padding T H W): benches/conv/main.rs `shapes()`.
SHAPES = [
    ("up3 resnet 96", 96, 96, (3, 3, 3), (6, 480, 832), (0, 1, 1)),
    ("up2 resnet 192", 192, 192, (3, 3, 3), (6, 240, 416), (0, 1, 1)),
    ("up2 upsample 192->96", 192, 96, (1, 3, 3), (4, 480, 832), (0, 1, 1)),
    ("up1 upsample 384->192", 384, 192, (1, 3, 3), (4, 240, 416), (0, 1, 1)),
    ("up1 resnet 384", 384, 384, (3, 3, 3), (4, 120, 208), (0, 1, 1)),
    ("up1 resnet 192->384", 192, 384, (3, 3, 3), (4, 120, 208), (0, 1, 1)),
    ("mid/up0 resnet 384", 384, 384, (3, 3, 3), (3, 60, 104), (0, 1, 1)),
    ("conv_out 96->3", 96, 3, (3, 3, 3), (6, 480, 832), (0, 1, 1)),
    ("up0 upsample 384->192", 384, 192, (1, 3, 3), (2, 120, 208), (0, 1, 1)),
    ("up1 time_conv 384->768", 384, 768, (3, 1, 1), (4, 120, 208), (0, 0, 0)),
    ("up0 time_conv 384->768", 384, 768, (3, 1, 1), (3, 60, 104), (0, 0, 0)),
    ("up1 shortcut 192->384", 192, 384, (1, 1, 1), (2, 120, 208), (0, 0, 0)),
    ("conv_in 16->384", 16, 384, (3, 3, 3), (3, 60, 104), (0, 1, 1)),
    ("attention qkv 384->1152", 384, 1152, (1, 1, 1), (1, 60, 104), (0, 0, 0)),
    ("attention proj 384->384", 384, 384, (1, 1, 1), (1, 60, 104), (0, 0, 0)),
    ("post_quant_conv 16->16", 16, 16, (1, 1, 1), (21, 60, 104), (0, 0, 0)),
]

FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")


def time_us(fn, warmup=3, runs=10):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        FLUSH.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2]


def convs(out_dir):
    rows = []
    for index, (what, ci, co, k, inp, pad) in enumerate(SHAPES):
        t, h, w = inp
        x = torch.randn(1, ci, t, h, w, device="cuda", dtype=torch.bfloat16)
        wt = torch.randn(co, ci, *k, device="cuda", dtype=torch.bfloat16) * (3.0 / (ci * k[0] * k[1] * k[2])) ** 0.5
        b = torch.randn(co, device="cuda", dtype=torch.bfloat16) * 0.1
        out_t = t + pad[0] + 1 - k[0]
        flops = 2.0 * out_t * h * w * co * ci * k[0] * k[1] * k[2]
        result = {"index": index, "site": what}
        for layout in ("default", "channels_last"):
            torch.backends.cudnn.benchmark = layout == "channels_last"
            if k[0] == 1:
                # diffusers runs these per frame as Conv2d on [B T, C, H, W].
                x2 = x.permute(0, 2, 1, 3, 4).reshape(t, ci, h, w)
                w2 = wt[:, :, 0]
                if layout == "channels_last":
                    x2 = x2.contiguous(memory_format=torch.channels_last)
                    w2 = w2.contiguous(memory_format=torch.channels_last)
                else:
                    x2 = x2.contiguous()
                    w2 = w2.contiguous()
                fn = lambda x2=x2, w2=w2: F.conv2d(x2, w2, b, padding=pad[1:])
            else:
                x3, w3 = x, wt
                if layout == "channels_last":
                    x3 = x.contiguous(memory_format=torch.channels_last_3d)
                    w3 = wt.contiguous(memory_format=torch.channels_last_3d)
                fn = lambda x3=x3, w3=w3: F.conv3d(x3, w3, b, padding=pad)
            us = time_us(fn)
            result[layout + "_us"] = round(us, 2)
            result[layout + "_tflops"] = round(flops / (us * 1e-6) / 1e12, 1)
        rows.append(result)
        print(
            f"#{index:<2} {what:<26} cuDNN default {result['default_us']:>9.1f} us "
            f"({result['default_tflops']:>5.1f} TFLOP/s), channels_last+benchmark "
            f"{result['channels_last_us']:>9.1f} us ({result['channels_last_tflops']:>5.1f})",
            flush=True,
        )
        del x, wt
    with open(f"{out_dir}/torch_convs.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)


def model():
    from diffusers import AutoencoderKLWan

    torch.manual_seed(0)
    return AutoencoderKLWan().eval()


def paths(out_dir, t):
    return f"{out_dir}/wan21_random_decoder.safetensors", f"{out_dir}/latent_t{t}.safetensors"


def prepare(out_dir, t):
    from safetensors.torch import save_file

    vae = model()
    weights_path, latent_path = paths(out_dir, t)
    state = {
        k: v.detach().float().contiguous()
        for k, v in vae.state_dict().items()
        if k.startswith("decoder.") or k.startswith("post_quant_conv.")
    }
    save_file(state, weights_path)
    g = torch.Generator().manual_seed(t)
    z = torch.randn(1, 16, t, 60, 104, generator=g)
    vae = vae.cuda()
    # A true f32 reference: no TF32 in cuDNN's convolutions or the attention's matmuls.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.no_grad():
        ref = vae.decode(z.cuda()).sample.float().cpu()
    save_file({"z": z.contiguous(), "video_f32": ref.contiguous()}, latent_path)
    print(f"prepared {weights_path} ({len(state)} tensors) and {latent_path}: video {list(ref.shape)}")


def psnr(a, b):
    mse = torch.mean((a.clamp(-1, 1).double() - b.clamp(-1, 1).double()) ** 2).item()
    return 10.0 * torch.log10(torch.tensor(4.0 / mse)).item()


def decode(out_dir, t):
    from safetensors.torch import load_file

    _, latent_path = paths(out_dir, t)
    data = load_file(latent_path)
    ref = data["video_f32"]
    vae = model().cuda().to(torch.bfloat16)
    for layout in ("eager", "channels_last_3d"):
        torch.backends.cudnn.benchmark = layout != "eager"
        z = data["z"].cuda().to(torch.bfloat16)
        if layout != "eager":
            # Only convolution weights have a channels-last form (gammas and biases do not).
            for m in vae.modules():
                if isinstance(m, torch.nn.Conv3d):
                    m.weight.data = m.weight.data.contiguous(memory_format=torch.channels_last_3d)
                elif isinstance(m, torch.nn.Conv2d):
                    m.weight.data = m.weight.data.contiguous(memory_format=torch.channels_last)
            z = z.contiguous(memory_format=torch.channels_last_3d)
        with torch.no_grad():
            vae.decode(z)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            times = []
            for _ in range(3):
                start = time.perf_counter()
                video = vae.decode(z).sample
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
        peak = torch.cuda.max_memory_allocated() / 2**30
        times.sort()
        q = psnr(video.float().cpu(), ref)
        print(
            f"diffusers {layout}, bf16, T = {t} -> {video.shape[2]} frames: {times[1]:.3f} s "
            f"(median of 3; {1e3 * times[1] / t:.1f} ms per latent frame), peak allocated "
            f"{peak:.2f} GiB, PSNR vs f32 {q:.2f} dB",
            flush=True,
        )
        del video


def psnr_file(out_dir, t, path):
    from safetensors.torch import load_file

    _, latent_path = paths(out_dir, t)
    ref = load_file(latent_path)["video_f32"]
    ours = load_file(path)["video"]
    assert ours.shape == ref.shape, f"{list(ours.shape)} vs {list(ref.shape)}"
    print(f"PSNR of {path} vs the f32 diffusers decode (T = {t}): {psnr(ours, ref):.2f} dB")


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "convs":
        convs(out)
    elif mode == "prepare":
        prepare(out, int(sys.argv[3]))
    elif mode == "decode":
        decode(out, int(sys.argv[3]))
    elif mode == "psnr":
        psnr_file(out, int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(f"unknown mode {mode}")
