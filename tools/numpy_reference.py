#!/usr/bin/env python3
"""What a researcher would write by hand: the dsa-recall V4-Flash trial in
plain vectorised NumPy, for speed and sanity comparisons (not used by tests).

Same model as docs/MODEL.md with the deepseek-v4-flash preset: 64 heads × 128
dims, keys k = a·u + σ⊙z (4 outlier channels ×8, common 0.5), signed head
weights (|w| on the 16 looking heads), minimum-norm needle offset δ with
strength 1, c = 4 with overlapping windows, W = 128, 4-token needle at depth
50 %, every visible row competes, fp32 keys/queries and fp32 scoring
(I = (H·d)^-1/2 · Σ_h w_h·ReLU(q_h·k)). Ranks by counting, ties broken by the
lower row index (ties do not happen with fp32 logits). NumPy's float64
Gaussian RNG (PCG64 + ziggurat), cast to fp32, replaces the crate's generator,
so single trials differ from the crate's and only recall rates compare.

    python3 tools/numpy_reference.py --contexts 32K,128K --trials 20
    python3 tools/numpy_reference.py --contexts 32K --trials 400 --recall --json

--json prints one JSON object per context: {"context", "trials", "seconds",
"trials_per_s", "survived", "recall", "k"}.
"""
import argparse
import json
import time

import numpy as np

HEADS, DIM = 64, 128
RATIO, WINDOW = 4, 128
NEEDLE_TOKENS, NEEDLE_HEADS, STRENGTH = 4, 16, 1.0
COMMON, OUTLIERS, OUTLIER_SCALE = 0.5, 4, 8.0


def parse_context(text):
    text = text.strip().upper()
    mult = {"K": 1024, "M": 1024 * 1024}.get(text[-1], 1)
    return int(text[:-1] if mult > 1 else text) * mult


def needle_rows(context, depth=50.0):
    start = int(np.floor(depth / 100.0 * (context - NEEDLE_TOKENS) + 0.5))
    end = min(start + NEEDLE_TOKENS, context)
    visible = context // RATIO
    first, last = start // RATIO, (end - 1) // RATIO + 1  # overlap: the next row pools these tokens too
    return min(first, visible), min(last + 1, visible), start >= context - WINDOW


def trial(rng, context, k, chunk_rows=None):
    """One trial; True when the needle survives top-k."""
    rows = context // RATIO
    q = rng.standard_normal((HEADS, DIM)).astype(np.float32)
    w = rng.standard_normal(HEADS)
    w[:NEEDLE_HEADS] = np.abs(w[:NEEDLE_HEADS])
    w = (w / np.sqrt(HEADS * DIM)).astype(np.float32)
    sigma = np.ones(DIM)
    sigma[:OUTLIERS] = OUTLIER_SCALE
    u = rng.standard_normal(DIM)
    common = (COMMON * np.linalg.norm(sigma) * u / np.linalg.norm(u)).astype(np.float32)
    # Minimum-norm δ: Q δ = target (strength·σ_h on looking heads, 0 elsewhere).
    q64 = q.astype(np.float64)
    target = np.zeros(HEADS)
    target[:NEEDLE_HEADS] = STRENGTH * np.sqrt(((q64[:NEEDLE_HEADS] * sigma) ** 2).sum(axis=1))
    delta = (q64.T @ np.linalg.solve(q64 @ q64.T, target)).astype(np.float32)

    keys = rng.standard_normal((rows, DIM), dtype=np.float32) * sigma.astype(np.float32) + common
    lo, hi, in_window = needle_rows(context)
    keys[lo:hi] += delta
    scores = np.maximum(keys @ q.T, 0.0) @ w  # fp32 [rows × 64] then [64]
    if hi <= lo:
        return in_window
    best = scores[lo:hi].max()
    competitors = np.concatenate([scores[:lo], scores[hi:]])
    above = int((competitors > best).sum())
    return in_window or above < min(k, rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", default="32K,128K")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--topk", type=int, default=512)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    for text in args.contexts.split(","):
        context = parse_context(text)
        trial(rng, context, args.topk)  # warm-up (allocations, BLAS threads)
        start = time.perf_counter()
        survived = sum(trial(rng, context, args.topk) for _ in range(args.trials))
        seconds = time.perf_counter() - start
        out = {
            "context": context,
            "trials": args.trials,
            "seconds": seconds,
            "trials_per_s": args.trials / seconds,
            "survived": survived,
            "recall": survived / args.trials,
            "k": args.topk,
        }
        if args.json:
            print(json.dumps(out))
        else:
            print(f"numpy fp32 trial at {text}: {1e3 * seconds / args.trials:.1f} ms/trial, "
                  f"{out['trials_per_s']:.2f} trials/s, recall {out['recall']:.3f} ({survived}/{args.trials}), k {args.topk}")


if __name__ == "__main__":
    main()
