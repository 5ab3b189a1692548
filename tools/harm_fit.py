#!/usr/bin/env python3
"""Fits the lost-layer harm c (stack.lost_layer_harm) to the one public
measurement of a fault in some layers of a shared-selection model, and
prints the likelihood over a grid of c with its 95 % interval.

    python3 tools/harm_fit.py [BINARY]    # default target/release/dsa-recall

The measurement (ml-explore/mlx-lm #1453, 2026-08-19 comment; root cause in
exo-explore/exo #2208): GLM-5.2 on MLX ran randomly initialised indexers in
its 57 shared layers; needle tests at temperature 0, index_topk 2048:
2,112 tokens "flaky", 2,649 / 4,472 / 7,294 / 14,938 tokens "garbage", all
five correct with index_topk 32768. Transcribed as in
examples/incidents/mlx_layer_share.csv: "flaky" 1 of 2, "garbage" 0 of 1,
depth 50 %.

The fault is modelled as `bf16+row-shift+layers=reusers` on the glm-5.2
preset: each shared layer selects by scores unrelated to the query (its
own draw) instead of reusing the full layer's top-k. For each c the
simulator's whole-model recall p_i(c) gives the likelihood
prod_i C(n_i, f_i) p_i^f_i (1 - p_i)^(n_i - f_i). A row that no c can
explain (likelihood 0 at every c) is reported and left out of the fit.
The interval is where the log-likelihood is within 1.92 of its maximum
(the likelihood-ratio 95 % interval for one parameter).
"""

import csv
import math
import subprocess
import sys
import tempfile

ROWS = [(2112, 1, 2), (2649, 0, 1), (4472, 0, 1), (7294, 0, 1), (14938, 0, 1)]
GRID = [0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0]
TRIALS = 400


def whole_model_recall(binary, c):
    """Whole-model recall of the fault at each row's length, at harm c."""
    with tempfile.TemporaryDirectory() as out:
        contexts = ",".join(str(r[0]) for r in ROWS)
        subprocess.run(
            [binary, "sweep", "--preset", "glm-5.2", "--contexts", contexts, "--depths", "50", "--topk", "2048",
             "--precisions", "bf16,bf16+row-shift+layers=reusers", "--trials", str(TRIALS), "--seed", "42",
             "--lost-layer-harm", str(c), "--lost-layer-harm-band", f"{c}..{c}", "--out", out, "--force"],
            check=True, capture_output=True)
        with open(f"{out}/summary.csv") as f:
            cells = [r for r in csv.DictReader(f) if r["precision"] != "bf16"]
        return {int(r["context_tokens"]): float(r["model_recall"]) for r in cells}


def log_likelihood(p, found, total):
    if (found > 0 and p <= 0.0) or (found < total and p >= 1.0):
        return -math.inf
    ll = math.log(math.comb(total, found))
    if found:
        ll += found * math.log(p)
    if total - found:
        ll += (total - found) * math.log(1.0 - p)
    return ll


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/dsa-recall"
    table = {c: whole_model_recall(binary, c) for c in GRID}
    impossible = [r for r in ROWS if all(log_likelihood(table[c][r[0]], r[1], r[2]) == -math.inf for c in GRID)]
    used = [r for r in ROWS if r not in impossible]
    print("whole-model recall of bf16+row-shift+layers=reusers on glm-5.2, by harm c (%d trials)" % TRIALS)
    print("      c  " + "  ".join(f"{r[0]:>7}" for r in ROWS) + "   log L (rows used)")
    lls = {}
    for c in GRID:
        lls[c] = sum(log_likelihood(table[c][r[0]], r[1], r[2]) for r in used)
        print(f"  {c:5.2f}  " + "  ".join(f"{table[c][r[0]]:7.3f}" for r in ROWS) + f"   {lls[c]:8.3f}")
    best = max(GRID, key=lambda c: lls[c])
    inside = [c for c in GRID if lls[c] >= lls[best] - 1.92]
    for r in impossible:
        print(f"row {r[0]} tokens ({r[1]} of {r[2]} found) has likelihood 0 at every c: no c explains it; left out")
    print(f"maximum likelihood c = {best}; 95 % likelihood-ratio interval on the grid: {min(inside)} .. {max(inside)}")


if __name__ == "__main__":
    main()
