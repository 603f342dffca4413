"""PNG chart of bench.csv: achieved GB/s per shape against the copy roof of the same run.

    python3 benches/plot.py DIR     (reads DIR/bench.csv, optional DIR/torch.csv; writes DIR/bench.png)
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

d = sys.argv[1] if len(sys.argv) > 1 else "target/bench"
rows = list(csv.DictReader(open(os.path.join(d, "bench.csv"))))
torch_rows = {}
if os.path.exists(os.path.join(d, "torch.csv")):
    for r in csv.DictReader(open(os.path.join(d, "torch.csv"))):
        torch_rows[(r["c"], r["t"])] = r
labels = [f"C{r['c']}\nT{int(r['t']) // 1000}k" if int(r["t"]) >= 1000 else f"C{r['c']}\nT{r['t']}" for r in rows]
gbps = [float(r["kernel_gbps"]) for r in rows]
roof = [float(r["copy_gbps"]) for r in rows]
fig, ax = plt.subplots(figsize=(max(12, len(rows) * 0.35), 5))
xs = range(len(rows))
ax.bar(xs, roof, color="#dddddd", label="same-bytes copy (roof, same run)")
ax.bar(xs, gbps, width=0.5, color="#2a6fdb", label="rms_norm_silu (this crate)")
if torch_rows:
    tc = []
    for r in rows:
        t = torch_rows.get((r["c"], r["t"]))
        bytes_ = int(r["c"]) * int(r["t"]) * 4 + int(r["c"]) * 2
        tc.append(bytes_ / float(t["compile_us"]) / 1e3 if t else float("nan"))
    ax.plot(xs, tc, "o", color="#e4572e", markersize=4, label="torch.compile")
ax.set_xticks(list(xs))
ax.set_xticklabels(labels, fontsize=6)
ax.set_ylabel("GB/s (bytes read + written)")
ax.set_title("Fused RMSNorm + SiLU, bf16, H200")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(os.path.join(d, "bench.png"), dpi=110)
print("wrote", os.path.join(d, "bench.png"))
