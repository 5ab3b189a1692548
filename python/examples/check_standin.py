"""Check a stand-in lightning indexer with `dsa-recall check` (issue 29, item 5).

A self-contained PyTorch module written the way the engines write their
indexer (sglang's NSA indexer and DeepGEMM's paged logits for DeepSeek-V3.2):
q and k projections, LayerNorm on k, the orthonormal Hadamard rotation on
both, e4m3fn quantization with one fp32 scale per row (amax/448, rounded up
to a power of two: ue8m0), keys stored in a paged cache of 64-row pages
(64 x 128 code bytes, then 64 fp32 scales; sglang-v32-fp8), head weights
folded with (H*d)^-1/2 and the query's scale as the logits kernel receives
them, logits Σ_h w_h·ReLU(q_h·k)·s_k in fp32 (TF32 off), torch.topk.

The indexer is hooked with dsa_recall.IndexerCapture, the capture is saved,
and `dsa-recall check` (the CLI; dr.check too when the package is
installed) recomputes the reference from the cache bytes. With --fault, the
module's *reader* gets one of the field's layout bugs (its writer stays
right), and check must fail and name it:

    python python/examples/check_standin.py                       # CPU, healthy: exit 0
    python python/examples/check_standin.py --device cuda         # the GPU run
    python python/examples/check_standin.py --device cuda --fault slot-shift
    python python/examples/check_standin.py --device cuda --fault interleaved-read
    python python/examples/check_standin.py --device cuda --layers 61 --context 65536 --topk 2048

The script exits 0 when check's verdict is the expected one (equal up to
ties when healthy; a mismatch naming the injected fault first otherwise),
1 when it is not, and 0 with a message when torch is missing. It finds the
CLI through DSA_RECALL_BIN, then target/release/dsa-recall, then PATH.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import torch
    from torch import nn
except ImportError:
    print("torch is not installed: skipping the check stand-in (pip install torch to run it)")
    sys.exit(0)

REPO = Path(__file__).resolve().parents[2]
try:
    from dsa_recall.capture import IndexerCapture
except ImportError:
    # The package is not installed: its capture helper needs NumPy only, so
    # load it from the source tree.
    import importlib.util

    _spec = importlib.util.spec_from_file_location("dsa_recall_capture", REPO / "python" / "dsa_recall" / "capture.py")
    _capture = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_capture)
    IndexerCapture = _capture.IndexerCapture

PAGE, DIM, FP8_MAX = 64, 128, 448.0
FAULTS = {"slot-shift": "slot-shift", "interleaved-read": "layout-interleaved-read", "scale-offset": "scale-offset", "block-row0": "block-row0"}


def hadamard(n, device):
    """Orthonormal Walsh-Hadamard matrix (Sylvester order), n a power of two."""
    h = torch.ones(1, 1, device=device)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / n**0.5


def fp8_rows(x):
    """e4m3fn codes (uint8) and one ue8m0 scale per row, as act_quant(..., 128, "ue8m0")."""
    amax = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-4)
    scale = torch.pow(2.0, torch.ceil(torch.log2(amax / FP8_MAX)))
    codes = (x / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return codes.view(torch.uint8), scale.squeeze(-1).float()


class StandInIndexer(nn.Module):
    """One indexer layer with its own paged fp8 key cache."""

    def __init__(self, hidden, heads, num_pages, fault=None, device="cpu"):
        super().__init__()
        self.heads, self.fault = heads, fault
        self.wq = nn.Linear(hidden, heads * DIM, bias=False)
        self.wk = nn.Linear(hidden, DIM, bias=False)
        self.weights_proj = nn.Linear(hidden, heads, bias=False)
        self.k_norm = nn.LayerNorm(DIM)
        self.register_buffer("h", hadamard(DIM, device))
        # sglang's index_k_with_scale_buffer: [pages, 64 * (128 + 4)] bytes.
        self.register_buffer("cache", torch.zeros(num_pages, PAGE * (DIM + 4), dtype=torch.uint8, device=device))

    def write(self, x, block_table):
        """Quantizes the keys of tokens 0..n-1 into their pages (the writer: always right)."""
        k = self.k_norm(self.wk(x)) @ self.h
        codes, scale = fp8_rows(k)
        # Flat byte offsets, as sglang's SetK/SetS: codes at page·stride + slot·128,
        # the scale at page·stride + 64·128 + slot·4.
        t = torch.arange(x.shape[0], device=x.device)
        base = block_table[t // PAGE].long() * self.cache.shape[1]
        slot = t % PAGE
        flat = self.cache.view(-1)
        flat[(base + slot * DIM)[:, None] + torch.arange(DIM, device=x.device)[None, :]] = codes
        flat[(base + PAGE * DIM + 4 * slot)[:, None] + torch.arange(4, device=x.device)[None, :]] = scale[:, None].contiguous().view(torch.uint8)

    def read(self, seq_len, block_table):
        """Keys (fp8 values as float) and scales of rows 0..seq_len-1: the reader, with the fault if any."""
        rows = torch.arange(seq_len, device=self.cache.device)
        pages = block_table[rows // PAGE].long()
        slots = rows % PAGE
        if self.fault == "slot-shift":
            slots = (slots + 1) % PAGE
        if self.fault == "block-row0":
            slots = torch.zeros_like(slots)
        code_at = slots[:, None] * DIM + torch.arange(DIM, device=rows.device)[None, :]
        scale_slots = (slots + 1) % PAGE if self.fault == "scale-offset" else slots
        scale_at = PAGE * DIM + 4 * scale_slots[:, None] + torch.arange(4, device=rows.device)[None, :]
        if self.fault == "interleaved-read":
            code_at = slots[:, None] * (DIM + 4) + torch.arange(DIM, device=rows.device)[None, :]
            scale_at = slots[:, None] * (DIM + 4) + DIM + torch.arange(4, device=rows.device)[None, :]
        blocks = self.cache[pages]
        codes = torch.gather(blocks, 1, code_at).contiguous().view(torch.float8_e4m3fn).float()
        scales = torch.gather(blocks, 1, scale_at).contiguous().view(torch.float32).squeeze(-1)
        return codes, scales

    def forward(self, x_query, seq_len, block_table, topk):
        q = (self.wq(x_query).view(self.heads, DIM)) @ self.h
        q_codes, q_scale = fp8_rows(q)
        # The logits kernel's weights: w · H^-1/2 · d^-1/2 · q_scale (sglang's _get_logits_head_gate).
        w = self.weights_proj(x_query).float() * self.heads**-0.5 * DIM**-0.5 * q_scale
        k, k_scale = self.read(seq_len, block_table)
        dots = q_codes.view(torch.float8_e4m3fn).float() @ k.T  # [heads, rows], fp32
        logits = (torch.relu(dots) * w[:, None]).sum(0) * k_scale
        top = torch.topk(logits, min(topk, seq_len)).indices
        return {"q_codes": q_codes, "q_scales": q_scale, "weights": w, "logits": logits, "topk_indices": top}


def find_cli():
    env = os.environ.get("DSA_RECALL_BIN")
    for p in [env, REPO / "target" / "release" / "dsa-recall", shutil.which("dsa-recall")]:
        if p and Path(p).is_file():
            return str(p)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--context", type=int, default=4096, help="tokens in the cache (rows per layer)")
    ap.add_argument("--queries", type=int, default=2, help="decode queries per layer (the last positions)")
    ap.add_argument("--topk", type=int, default=512)
    ap.add_argument("--heads", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--fault", choices=sorted(FAULTS), default=None)
    ap.add_argument("--out", default=None, help="capture path (default: a temporary folder)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    # fp32 products as fp32 (no TF32), so the engine's logits are an f32 evaluation.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    pages_used = -(-args.context // PAGE)
    num_pages = pages_used + 8
    block_table = torch.randperm(num_pages, device=dev)[:pages_used].to(torch.int32)
    cap = IndexerCapture("sglang-v32-fp8", pipeline="fp8", weights="kernel", topk=args.topk,
                         note=f"check_standin.py on {args.device} ({torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}), fault {args.fault}")
    print(f"stand-in indexer on {dev}: {args.layers} layers, {args.context} rows, {args.heads} heads, k {args.topk}, fault {args.fault}")
    with torch.no_grad():
        for layer in range(args.layers):
            m = StandInIndexer(args.hidden, args.heads, num_pages, fault=args.fault, device=dev).to(dev)
            x = torch.randn(args.context, args.hidden, device=dev)
            m.write(x, block_table)
            state = {}

            def extract(mod, inputs, out, layer=layer, state=state):
                return {"layer": layer, "query": state["pos"], "kv_cache": mod.cache, "block_table": block_table,
                        "seq_len": state["seq_len"], **out}

            handle = cap.hook(m, extract)
            for i in range(args.queries):
                pos = args.context - args.queries + i
                state.update(pos=pos, seq_len=pos + 1)
                m(x[pos], pos + 1, block_table, args.topk)
            handle.remove()
    tmp = tempfile.mkdtemp(prefix="dsa-recall-standin-")
    # The capture and the report are this run's scratch: removed at the end
    # (a --out capture is the user's and stays).
    try:
        return _check_capture(cap, args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_capture(cap, args, tmp):
    """Saves the capture, checks it with the CLI and dr.check; 0 when the verdicts are the expected ones."""
    path = cap.save(args.out or os.path.join(tmp, "capture.safetensors"))
    print(f"capture: {path} ({sum(f.stat().st_size for f in Path(path).parent.glob(Path(path).name + '*'))} bytes)")

    cli = find_cli()
    verdicts = []
    if cli:
        report = os.path.join(tmp, "report.json")
        r = subprocess.run([cli, "check", path, "--out", report], capture_output=True, text=True)
        print(f"$ dsa-recall check {path}  (exit {r.returncode})")
        print(r.stdout + r.stderr)
        data = json.load(open(report)) if os.path.exists(report) else {}
        verdicts.append(("cli", r.returncode, data.get("reproduced_by", [])))
    else:
        print("no dsa-recall binary (set DSA_RECALL_BIN or cargo build --release): CLI skipped")
    try:
        import dsa_recall as dr

        res = dr.check(path)
        print(f"dr.check: {res!r}")
        verdicts.append(("python", res.exit_code, res.reproduced_by))
    except ImportError:
        print("dsa_recall's native module is not built here (pip install ./python): dr.check skipped")
    if not verdicts:
        print("nothing could check the capture")
        return 1
    want = 0 if args.fault is None else 1
    ok = all(code == want and (args.fault is None or (by and by[0] == FAULTS[args.fault])) for _, code, by in verdicts)
    print("as expected" if ok else f"UNEXPECTED: wanted exit {want}" + (f" naming {FAULTS[args.fault]}" if args.fault else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
