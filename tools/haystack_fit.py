#!/usr/bin/env python3
"""The `[haystack]` fit of issue 26 (docs/CALIBRATION.md, "The haystack fit").

For each setting of a small grid it measures, with the release binary:
  * the top-512 overlap of the ReLU score and the same score without ReLU, at
    32K, 128K and 256K tokens (V4-Flash preset, fp32, `trial --dump`, SEEDS
    trials per context), against the per-layer ranges sglang PR #33271
    reports for V4-Flash (0.71-0.88, 0.63-0.83, 0.55-0.83: falling with context);
  * the share of negative per-head products q_h.k (0.48-0.52 in the same capture);
  * the quantile needle (profile niah) at 56K tokens: its median rank and the
    share of trials the norm caps below its drawn exceedance (the rank capture,
    1Cat-vLLM PR #250, has no floor above the needle).
The objective is the sum over the three contexts of ((overlap - middle of
range) / half-width)^2; settings outside the sign-structure range or with
more than 2 % capped trials are rejected. Prints one line per setting and the
best. Run from the project root after `cargo build --release`:

    python3 tools/haystack_fit.py            # the grid below, ~15 min on 2 cores
    SEEDS=6 python3 tools/haystack_fit.py --content-rank 32   # one setting, quick
"""
import itertools, json, os, struct, subprocess, sys, tempfile
import numpy as np

B = os.environ.get("BIN", "target/release/dsa-recall")
SEEDS = int(os.environ.get("SEEDS", "20"))
RANGES = {"32K": (0.71, 0.88), "128K": (0.63, 0.83), "256K": (0.55, 0.83)}
NEG = (0.48, 0.52)
MAX_CAPPED = 0.02
GRID = {
    "--content-rank": ["32", "48", "64"],
    "--head-coherence": ["0.5", "0.7", "0.9"],
}
# The query's content share (0.8 in the presets) was on the grid at 0.8 and
# 0.9 once: no figure moved by more than 0.005, so it stays at 0.8.
# Every setting starts from the preset with the relevance tail off; the grid
# varies the content subspace and the looking heads' shared direction.
BASE = ["--relevance-scale", "0"]


def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    base = 8 + n

    def t(name):
        s, e = h[name]["data_offsets"]
        return np.frombuffer(b[base + s:base + e], dtype=np.float32).reshape(h[name]["shape"]).astype(np.float64)

    return t("queries"), t("keys"), t("weights")


def measure(flags, tmp):
    row = {}
    for ctx in RANGES:
        negs, ovs = [], []
        for s in range(SEEDS):
            p = os.path.join(tmp, "t.safetensors")
            subprocess.run([B, "trial", "--context", ctx, "--depth", "50", "--topk", "512", "--precisions", "fp32",
                            "--seed", str(22 + s), "--dump", p, "--needle-profile", "stress"] + flags,
                           check=True, capture_output=True)
            q, k, w = load(p)
            dots = k @ q.T
            negs.append((dots < 0).mean())
            relu, lin = np.maximum(dots, 0) @ w, dots @ w
            ovs.append(len(set(np.argsort(-relu)[:512]) & set(np.argsort(-lin)[:512])) / 512)
        row[ctx] = (float(np.mean(ovs)), float(np.std(ovs, ddof=1) / np.sqrt(len(ovs))), float(np.mean(negs)))
    out = os.path.join(tmp, "rank")
    subprocess.run([B, "sweep", "--contexts", "56K", "--depths", "50", "--precisions", "fp32", "--topk", "512", "--trials", "200",
                    "--needle-profile", "niah", "--out", out, "--force"] + flags, check=True, capture_output=True)
    cell = [json.loads(l) for l in open(os.path.join(out, "results.jsonl")) if l.strip()][0]
    row["rank"] = (cell["median_rank"], cell["needle_capped"] / cell["trials"])
    return row


def score(row):
    obj = sum(((row[c][0] - (lo + hi) / 2) / ((hi - lo) / 2)) ** 2 for c, (lo, hi) in RANGES.items())
    inside = all(lo <= row[c][0] <= hi for c, (lo, hi) in RANGES.items())
    falling = row["32K"][0] > row["128K"][0] > row["256K"][0]
    neg_ok = all(NEG[0] <= row[c][2] <= NEG[1] for c in RANGES)
    ok = inside and neg_ok and row["rank"][1] <= MAX_CAPPED
    return obj, ok, falling


def main():
    settings = [sys.argv[1:]] if len(sys.argv) > 1 else [
        [x for pair in zip(GRID, values) for x in pair] for values in itertools.product(*GRID.values())
    ]
    best = None
    with tempfile.TemporaryDirectory() as tmp:
        for flags in settings:
            row = measure(BASE + flags, tmp)
            obj, ok, falling = score(row)
            cells = " ".join(f"{c} {row[c][0]:.3f}±{row[c][1]:.3f} neg {row[c][2]:.3f}" for c in RANGES)
            print(f"{' '.join(flags):60s} {cells} | 56K median rank {row['rank'][0]} capped {row['rank'][1]:.3f} | "
                  f"objective {obj:.2f} {'ok' if ok else 'rejected'}{'' if falling else ' (not falling)'}", flush=True)
            if ok and (best is None or obj < best[0]):
                best = (obj, flags)
    if best:
        print(f"best: {' '.join(BASE + best[1])} (objective {best[0]:.2f})")


if __name__ == "__main__":
    main()
