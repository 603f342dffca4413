"""Markdown table and target summary from bench.csv (+ torch.csv) for BENCHMARKS.md.

    python3 benches/report.py DIR
"""
import csv
import os
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "target/bench"
rows = list(csv.DictReader(open(os.path.join(d, "bench.csv"))))
torch = {}
if os.path.exists(os.path.join(d, "torch.csv")):
    torch = {(r["c"], r["t"]): r for r in csv.DictReader(open(os.path.join(d, "torch.csv")))}

print("| C | T | knobs (source) | kernel µs | copy µs | kernel / copy | GB/s | torch.compile µs | torch copy µs | ours vs compile | Burn composed µs | vs Burn | API end-to-end µs |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
big_ok = small_ok = torch_ok = 0
big = small = torch_n = 0
for r in rows:
    k, cp = float(r["kernel_us"]), float(r["copy_us"])
    t = torch.get((r["c"], r["t"]))
    comp = float(t["compile_us"]) if t else float("nan")
    tcopy = float(t["torch_copy_us"]) if t else float("nan")
    e2e = r["end_to_end_us"]
    e2e = "" if e2e == "NaN" else e2e
    print(f"| {r['c']} | {r['t']} | `{r['knobs']}` ({r['source']}) | {k:.2f} | {cp:.2f} | {k / cp:.3f} | {float(r['kernel_gbps']):.0f} | {comp:.2f} | {tcopy:.2f} | {comp / k:.2f}x | {float(r['burn_composed_us']):.1f} | {float(r['speedup_vs_burn']):.1f}x | {e2e} |")
    if int(r["t"]) >= 24960:
        big += 1
        big_ok += k <= 1.11 * cp
    else:
        small += 1
        small_ok += k <= cp + 2.0
    if t:
        torch_n += 1
        torch_ok += k <= comp
print()
print(f"- T >= 24960, kernel <= 1.11 x copy: {big_ok} of {big} shapes")
print(f"- T <= 6240, kernel <= copy + 2 us: {small_ok} of {small} shapes")
if torch_n:
    print(f"- at least as fast as torch.compile: {torch_ok} of {torch_n} shapes")
