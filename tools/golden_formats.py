#!/usr/bin/env python3
"""Golden reference data for `dsa_recall::format`, computed with ml_dtypes.

Writes two CSV files (run from the repository root):

tests/data/golden_formats.csv, one case per line:
    dec,<format>,<code hex>,<decoded f32 bits hex>
        every code of e4m3fn, e5m2 and e2m1, decoded by ml_dtypes.
    enc,<format>,<input f32 bits hex>,<cast code>,<cast decoded bits>,<sat code>,<sat decoded bits>
        "cast" is the plain `np.array(x, float32).astype(fmt)`; "sat" is
        `np.clip(x, -max, max).astype(fmt)` (clip-then-cast; np.clip keeps
        NaN as NaN, so NaN rows are identical in both).
    Formats: f32, bf16, fp16 (numpy float16), e4m3fn, e5m2, e2m1.

tests/data/golden_e4m3fnuz.csv: the same dec/enc records for float8_e4m3fnuz
    (read-only in the simulator: `format::element::e4m3fnuz`).

tests/data/golden_block_scaling.csv, one block per line:
    <rule>,<scale f32 bits>,<inputs>,<codes>,<dequantized f32 bits>
    with space-separated hex lists. Every rule: amax = max(max|x|, floor),
    scale s from amax, q = clip(x / s, -max, max) cast to the element format
    (f32 division, plain cast), dequantized q * s (f32 product).
      fp8:      DeepSeek act_quant: blocks of 128, e4m3fn, floor 1e-4,
                s = 2^ceil(log2(amax/448)) (ceil evaluated exactly with rationals).
      fp4:      DeepSeek V4 indexer: blocks of 32, e2m1, floor 6 * 2^-126,
                s = 2^ceil(log2(amax/6)).
      fp8_fp32: as fp8 but s = amax/448 in f32.
      mxfp8, mxfp4: OCP MX: blocks of 32, no floor, s = 2^(floor(log2 amax) - emax)
                with emax 8 (e4m3fn) or 2 (e2m1).
      nvfp4:    blocks of 16, e2m1, no floor, s = e4m3fn(amax/6); a zero scale
                stores signed zeros.
    The ue8m0 exponent is clamped to [-127, 127]; amax = 0 gives s = 1 (a
    convention of the Rust side, the block is all zeros anyway).

Requires `pip install ml_dtypes numpy`. Deterministic (fixed seeds).
"""

import math
import os
import sys
import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np

warnings.simplefilter("ignore")  # NaN/overflow casts warn; they are the point

FORMATS = {
    "f32": np.float32,
    "bf16": ml_dtypes.bfloat16,
    "fp16": np.float16,
    "e4m3fn": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e2m1": ml_dtypes.float4_e2m1fn,
}
CODE_WIDTH = {"f32": np.uint32, "bf16": np.uint16, "fp16": np.uint16,
              "e4m3fn": np.uint8, "e5m2": np.uint8, "e2m1": np.uint8, "e4m3fnuz": np.uint8}
# Read-only formats (not an ElementFormat of the simulator): their own file,
# generated after the others from their own seed so the files above keep
# their bytes.
EXTRA_FORMATS = {"e4m3fnuz": ml_dtypes.float8_e4m3fnuz}


def f32_from_bits(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits_of(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def codes_of(arr, name):
    return arr.view(CODE_WIDTH[name]).astype(np.uint32)


def finite_values(name, rng):
    """Sorted distinct non-negative finite values of the format (sampled for 16/32 bits)."""
    dtype = {**FORMATS, **EXTRA_FORMATS}[name]
    if name in ("e4m3fn", "e5m2", "e2m1", "e4m3fnuz"):
        n = 16 if name == "e2m1" else 256
        codes = np.arange(n // 2, dtype=np.uint8)
        vals = codes.view(dtype).astype(np.float32)
    elif name in ("bf16", "fp16"):
        # Small subnormals, the top of the range and random codes in between.
        codes = np.concatenate([np.arange(0, 64), np.arange(0x7b80, 0x7c00) if name == "fp16"
                                else np.arange(0x7f40, 0x7f80),
                                rng.integers(0, 0x7c00 if name == "fp16" else 0x7f80, 600)])
        vals = codes.astype(np.uint16).view(dtype).astype(np.float32)
    else:
        vals = f32_from_bits(np.concatenate([np.arange(0, 8), rng.integers(0, 0x7f800000, 200),
                                             np.arange(0x7f7ffff8, 0x7f800000)]).astype(np.uint32))
    vals = vals[np.isfinite(vals)]
    return np.unique(vals)


def next_value_up(name):
    """Value one step above max finite if the exponent range continued (for overflow threshold)."""
    dtype = {**FORMATS, **EXTRA_FORMATS}[name]
    mx = float(ml_dtypes.finfo(dtype).max)
    eps = float(ml_dtypes.finfo(dtype).eps)
    exp = math.floor(math.log2(mx))
    return mx + eps * 2.0 ** exp


def encode_inputs(name, rng):
    vals = finite_values(name, rng).astype(np.float64)
    inputs = [vals]
    if name != "f32":
        mids = (vals[:-1] + vals[1:]) / 2  # exact in f64, representable in f32
        inputs.append(mids)
        mids32 = mids.astype(np.float32)
        inputs.append(np.nextafter(mids32, np.float32(np.inf)).astype(np.float64))
        inputs.append(np.nextafter(mids32, np.float32(-np.inf)).astype(np.float64))
        mx = vals[-1]
        threshold = (mx + next_value_up(name)) / 2
        edge = np.array([mx, threshold, next_value_up(name), mx * 2, mx * 1e3], dtype=np.float32)
        edge = np.concatenate([edge, np.nextafter(edge, np.float32(np.inf)),
                               np.nextafter(edge, np.float32(-np.inf))])
        inputs.append(edge.astype(np.float64))
    x = np.concatenate(inputs).astype(np.float32)
    specials = f32_from_bits(np.array(
        [0, 1, 2, 0x7fffff, 0x800000, 0x7f7fffff, 0x7f800000, 0x7fc00000, 0x7f800001, 0x7fa00000,
         0x7fe00000, 0x7fffffff, 0x7f802000, 0x7fc02000, 0x3f800000], dtype=np.uint32))
    # Random f32 over a wide exponent range (and a few raw bit patterns).
    n_random = 200 if name == "f32" else 1500
    mantissa = rng.integers(0, 1 << 23, n_random, dtype=np.uint32)
    exponent = rng.integers(127 - 40, 127 + 20, n_random, dtype=np.uint32)
    random_bits = (exponent << 23) | mantissa
    raw = rng.integers(0, 1 << 31, 100, dtype=np.uint32)
    x = np.concatenate([x, specials, f32_from_bits(random_bits), f32_from_bits(raw)])
    sign = np.uint32(0x80000000)
    x = np.concatenate([x, f32_from_bits(bits_of(x) ^ sign)])  # both signs of everything
    _, first = np.unique(bits_of(x), return_index=True)
    return x[np.sort(first)]


def encode_rows(name, x):
    dtype = {**FORMATS, **EXTRA_FORMATS}[name]
    mx = np.float32(ml_dtypes.finfo(dtype).max) if name != "f32" else np.float32(np.finfo(np.float32).max)
    cast = x.astype(dtype)
    sat = np.clip(x, -mx, mx).astype(dtype)
    rows = []
    for xi, c, s in zip(bits_of(x), cast.reshape(-1, 1), sat.reshape(-1, 1)):
        rows.append("enc,%s,%08x,%x,%08x,%x,%08x" % (
            name, xi, codes_of(c, name)[0], bits_of(c.astype(np.float32))[0],
            codes_of(s, name)[0], bits_of(s.astype(np.float32))[0]))
    return rows


def decode_rows(name):
    n = 16 if name == "e2m1" else 256
    codes = np.arange(n, dtype=np.uint8)
    dec = codes.view({**FORMATS, **EXTRA_FORMATS}[name]).astype(np.float32)
    return ["dec,%s,%x,%08x" % (name, c, b) for c, b in zip(codes, bits_of(dec))]


def ceil_log2(r):
    """Exact ceil(log2 r) for a positive Fraction."""
    n = math.floor(math.log2(r))
    while Fraction(2) ** n < r:
        n += 1
    while Fraction(2) ** (n - 1) >= r:
        n -= 1
    return n


def block_scale(rule, amax, maxval, emax):
    """Scale of a block with (floored) amax, by the rule's scale format."""
    kind = RULES[rule][3]
    if amax <= 0:
        return np.float32(1.0)  # all-zero block: the Rust side uses scale 1
    if kind == "ue8m0_ceil":
        n = ceil_log2(Fraction(amax) / Fraction(float(maxval)))
    elif kind == "ue8m0_floor":
        n = math.frexp(amax)[1] - 1 - emax  # frexp is exact: floor(log2 amax) = e - 1
    elif kind == "fp32":
        return np.float32(amax) / np.float32(maxval)
    else:  # e4m3: amax / max in f32, rounded (saturating) to e4m3fn
        r = np.clip(np.float32(amax) / np.float32(maxval), 0, 448)
        return np.array(r, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)[()]
    return np.float32(2.0 ** max(-127, min(127, n)))


def quantize_block(rule, x):
    _, element, floor, _, emax = RULES[rule]
    maxval = np.float32(ml_dtypes.finfo(element).max)
    amax = max(float(np.max(np.abs(x))), float(np.float32(floor)))
    s = np.float32(block_scale(rule, amax, maxval, emax))
    if s == 0:  # a zero scale stores signed zeros
        q = np.copysign(np.float32(0), x).astype(element)
    else:
        q = np.clip(x / s, -maxval, maxval).astype(element)
    deq = q.astype(np.float32) * s
    return s, q, deq


# rule: (block length, element, amax floor, scale rule, emax of the element)
RULES = {
    "fp8": (128, ml_dtypes.float8_e4m3fn, 1e-4, "ue8m0_ceil", 8),
    "fp4": (32, ml_dtypes.float4_e2m1fn, 6.0 * 2.0 ** -126, "ue8m0_ceil", 2),
    "fp8_fp32": (128, ml_dtypes.float8_e4m3fn, 1e-4, "fp32", 8),
    "mxfp8": (32, ml_dtypes.float8_e4m3fn, 0.0, "ue8m0_floor", 8),
    "mxfp4": (32, ml_dtypes.float4_e2m1fn, 0.0, "ue8m0_floor", 2),
    "nvfp4": (16, ml_dtypes.float4_e2m1fn, 0.0, "e4m3", 2),
}


def block_rows(rng):
    rows = []
    for rule, (n, element, _, _, _) in RULES.items():
        maxval = float(ml_dtypes.finfo(element).max)
        blocks = []
        for sigma in [1e-6, 1e-3, 0.1, 1.0, 3.0, 50.0, 1e4]:
            for _ in range(3):
                blocks.append(rng.standard_normal(n) * sigma)
        outlier = rng.standard_normal(n)
        outlier[5] = 200.0
        blocks.append(outlier)
        blocks.append(np.zeros(n))
        blocks.append(np.full(n, 1e-7))
        tie = rng.standard_normal(n)
        for k in [-3, 0, 4]:  # amax exactly max * 2^k, and one f32 ulp above
            b = tie / np.max(np.abs(tie)) * maxval * 0.5
            b[0] = -maxval * 2.0 ** k
            blocks.append(b)
            above = b.copy()
            above[0] = np.nextafter(np.float32(above[0]), np.float32(-np.inf))
            blocks.append(above)
        ties = np.array([(i % 16) * 0.25 + 0.125 for i in range(n)]) * (maxval / 4.0)
        blocks.append(ties)  # lots of midpoints after scaling
        for b in blocks:
            x = b.astype(np.float32)
            s, q, deq = quantize_block(rule, x)
            rows.append("%s,%08x,%s,%s,%s" % (
                rule, bits_of(s), " ".join("%08x" % v for v in bits_of(x)),
                " ".join("%x" % v for v in q.view(np.uint8)),
                " ".join("%08x" % v for v in bits_of(deq))))
    return rows


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out_dir = os.path.join(root, "tests", "data")
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(20250601)
    lines = ["# generated by tools/golden_formats.py with ml_dtypes %s, numpy %s"
             % (ml_dtypes.__version__, np.__version__)]
    counts = {}
    for name in FORMATS:
        rows = (decode_rows(name) if name in ("e4m3fn", "e5m2", "e2m1") else [])
        rows += encode_rows(name, encode_inputs(name, rng))
        counts[name] = len(rows)
        lines += rows
    with open(os.path.join(out_dir, "golden_formats.csv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    block_lines = ["# generated by tools/golden_formats.py with ml_dtypes %s, numpy %s"
                   % (ml_dtypes.__version__, np.__version__)] + block_rows(rng)
    with open(os.path.join(out_dir, "golden_block_scaling.csv"), "w") as f:
        f.write("\n".join(block_lines) + "\n")
    # tests/data/golden_e4m3fnuz.csv: same record layout as golden_formats.csv.
    fnuz_rng = np.random.default_rng(20250602)
    fnuz_lines = ["# generated by tools/golden_formats.py with ml_dtypes %s, numpy %s"
                  % (ml_dtypes.__version__, np.__version__)]
    fnuz_lines += decode_rows("e4m3fnuz") + encode_rows("e4m3fnuz", encode_inputs("e4m3fnuz", fnuz_rng))
    with open(os.path.join(out_dir, "golden_e4m3fnuz.csv"), "w") as f:
        f.write("\n".join(fnuz_lines) + "\n")
    print("cases per format:", counts, "blocks:", len(block_lines) - 1,
          "e4m3fnuz:", len(fnuz_lines) - 1, file=sys.stderr)


if __name__ == "__main__":
    main()
