#!/usr/bin/env python3
"""Recompute every precision variant of a `dsa-recall trial --dump` with
PyTorch (on a GPU when there is one, else on the CPU) and compare with the
simulator's codes, scales, logits and selected rows.

    python3 tools/gpu_crosscheck.py DUMP.safetensors [...] [--json OUT.json]

The reimplementation is independent: it starts from the dumped fp32 queries,
keys and head weights, applies the pipeline described in the dump's metadata
with torch casts (torch.float8_e4m3fn / float8_e5m2 / bfloat16 / float16;
e2m1 by nearest-even rounding to its eight magnitudes), scores with fp32
matmuls (TF32 off) and selects with torch.topk. Differences are classified:
ties at the k-th logit (the tie order is the simulator's rule, not torch's),
or logits within the accumulation-order difference of the k-th.
"""
import argparse, json, math, struct, sys

import numpy as np
import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "U8": np.uint8, "U16": np.uint16, "U32": np.uint32}
MAX = {"e4m3fn": 448.0, "e5m2": 57344.0, "e2m1": 6.0, "bf16": 3.3895313892515355e38, "fp16": 65504.0, "f32": 3.4028234663852886e38}
EMAX = {"e4m3fn": 8, "e5m2": 15, "e2m1": 2}
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def load(path):
    """A small safetensors reader (the format is an 8-byte length, a JSON header, raw data)."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    meta = json.loads(header.pop("__metadata__")["dsa_recall"])
    base = 8 + n
    tensors = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        tensors[name] = np.frombuffer(raw[base + a : base + b], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return meta, tensors


def hadamard_rows(x):
    """Orthonormal Walsh-Hadamard of each row in float32, with the butterflies
    in the order the simulator uses (span 1, 2, 4, ...), then one multiply
    by float32(1/sqrt(d)): each add/sub is IEEE-exact-rounded on any device,
    so the rotated values are bit-identical to the simulator's."""
    rows, d = x.shape
    span = 1
    while span < d:
        v = x.reshape(rows, d // (2 * span), 2, span)
        a, b = v[:, :, 0, :], v[:, :, 1, :]
        x = torch.stack([a + b, a - b], dim=2).reshape(rows, d)
        span *= 2
    return x * torch.tensor(np.float32(1.0 / math.sqrt(d)), device=x.device)


def cast(x, element):
    """Round f32 values to the element format (values as float32; e2m1 saturates like ml_dtypes)."""
    if element == "f32":
        return x
    if element in ("e4m3fn", "e5m2", "bf16", "fp16"):
        dt = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "bf16": torch.bfloat16, "fp16": torch.float16}[element]
        return x.to(dt).to(torch.float32)
    if element == "e2m1":
        a = x.abs().to(torch.float64).clamp(max=6.0)
        grid = E2M1.to(x.device)
        idx = torch.bucketize(a, grid)  # first grid point >= a
        lo = (idx - 1).clamp(min=0)
        hi = idx.clamp(max=7)
        dlo, dhi = a - grid[lo], grid[hi] - a
        pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
        q = torch.where(pick_hi, grid[hi], grid[lo]).to(torch.float32)
        return torch.copysign(q, x)
    raise ValueError(element)


def scale_of(amax, element, rule, floor):
    m = MAX[element]
    amax = torch.clamp(amax, min=floor) if floor > 0 else amax
    if rule == "fp32":
        return (amax / m).to(torch.float32)
    if rule == "ue8m0_ceil":
        return torch.exp2(torch.ceil(torch.log2(amax.to(torch.float64) / m))).to(torch.float32)
    if rule == "ue8m0_floor":
        return torch.exp2(torch.floor(torch.log2(amax.to(torch.float64))) - EMAX[element]).to(torch.float32)
    if rule == "e4m3":
        return (amax / m).to(torch.float32).to(torch.float8_e4m3fn).to(torch.float32)
    raise ValueError(rule)


def quantize(x, side, d):
    """Returns (element values or dequantized values, one scale per row, block scales or None)."""
    if side["rotation"] == "hadamard":
        x = hadamard_rows(x)
    sc = side.get("scaling")
    if sc is None:
        return cast(x, side["element"]), torch.ones(x.shape[0], device=x.device), None
    shape = sc["shape"]
    block = d if shape == "row" else shape["block"]
    blocks = x.reshape(x.shape[0], d // block, block)
    amax = blocks.abs().amax(-1, keepdim=True)
    s = scale_of(amax, side["element"], sc["scale"], sc["amax_floor"])
    s = torch.where(amax <= 0, torch.ones_like(s), s)  # an all-zero block keeps scale 1
    m = MAX[side["element"]]
    safe = torch.where(s == 0, torch.ones_like(s), s)
    elems = cast(torch.clamp(blocks / safe, -m, m), side["element"])
    elems = torch.where(s == 0, torch.zeros_like(elems), elems)
    if block == d:
        return elems.reshape(x.shape), s.reshape(-1), s.reshape(x.shape[0], -1)
    return (elems * s).reshape(x.shape), torch.ones(x.shape[0], device=x.device), s.reshape(x.shape[0], -1)


def round_to(x, fmt):
    return x if fmt == "f32" else x.to(torch.bfloat16 if fmt == "bf16" else torch.float16).to(torch.float32)


def check(path, dev):
    meta, t = load(path)
    q = torch.from_numpy(t["queries"].copy()).to(dev)
    k = torch.from_numpy(t["keys"].copy()).to(dev)
    w = torch.from_numpy(t["weights"].copy()).to(dev)
    heads, d = q.shape
    k_eff = meta["k_eff"]
    out = {"file": path, "context_tokens": meta["context_tokens"], "rows": k.shape[0], "k_eff": k_eff, "device": str(dev), "variants": []}
    for v in meta["variants"]:
        name = v["name"]
        qe, qs, _ = quantize(q, v["query"], d)
        ke, ks, kblock = quantize(k, v["key"], d)
        wf = round_to(w * (1.0 / math.sqrt(heads * d)) * qs, v["scoring"]["weights"])
        dots = torch.relu(ke @ qe.T)  # [rows, heads], fp32 accumulation
        logits = round_to((dots @ wf) * ks, v["scoring"]["logits"])
        sim = torch.from_numpy(t[f"{name}.logits"].copy()).to(dev)
        diff = (logits - sim).abs()
        # Codes: compare the element values the simulator stored with ours.
        sim_sel = set(t[f"{name}.selected"].tolist())
        top = torch.topk(logits, k_eff).indices.tolist()
        ours = set(top)
        kth = torch.topk(sim, k_eff).values[-1].item()
        only_sim, only_gpu = sorted(sim_sel - ours), sorted(ours - sim_sel)
        tol = float(diff.max().item())
        why = []
        for r in only_sim + only_gpu:
            a, b = sim[r].item(), logits[r].item()
            if a == kth and b == kth:
                why.append("tie at the k-th logit")
            elif abs(a - kth) <= 2 * tol:
                why.append("within the logit difference of the k-th")
            else:
                why.append("unexplained")
        scales_match = None
        if f"{name}.k_scales" in t and kblock is not None:
            scales_match = bool(np.array_equal(t[f"{name}.k_scales"], kblock.cpu().numpy()))
        rel = (diff / sim.abs().clamp(min=1e-30)).max().item()
        out["variants"].append({
            "precision": name,
            "logits_bitwise_equal": int((diff == 0).sum().item()),
            "max_abs_logit_diff": tol,
            "max_rel_logit_diff": rel,
            "key_scales_identical": scales_match,
            "selected_identical": only_sim == [] and only_gpu == [],
            "rows_only_in_simulator": len(only_sim),
            "rows_only_on_gpu": len(only_gpu),
            "explanations": sorted(set(why)),
            "ties_at_kth": int((sim == kth).sum().item()),
        })
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dumps", nargs="+")
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--cpu", action="store_true", help="use the CPU even if a GPU is present")
    a = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() and not a.cpu else "cpu")
    reports = [check(p, dev) for p in a.dumps]
    for r in reports:
        print(f"{r['file']}: {r['rows']} rows, k_eff {r['k_eff']}, on {r['device']}")
        for v in r["variants"]:
            print(
                f"  {v['precision']:<14} equal logits {v['logits_bitwise_equal']:>7}/{r['rows']}  max |diff| {v['max_abs_logit_diff']:.3g}"
                f"  rel {v['max_rel_logit_diff']:.3g}  k-scales {v['key_scales_identical']}  same set {v['selected_identical']}"
                f"  (+{v['rows_only_on_gpu']}/-{v['rows_only_in_simulator']}) {', '.join(v['explanations'])}"
            )
    if a.json:
        json.dump(reports, open(a.json, "w"), indent=1)
    bad = [v for r in reports for v in r["variants"] if "unexplained" in v["explanations"]]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
