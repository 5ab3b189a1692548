"""Capture a lightning indexer's q, k and head weights with PyTorch forward
hooks and replay them through dsa_recall (docs/PYTHON.md, "Engine hooks").

The module below is a small stand-in for an engine's indexer (vLLM's or
SGLang's has the same three projections): hooks on its projections record
their outputs, as you would on the real module, and dsa_recall.replay
compares each precision's top-k with the exact fp32 one.

    python python/examples/forward_hook.py     # needs torch; skips without it
"""

import sys

import numpy as np

import dsa_recall

try:
    import torch
    from torch import nn
except ImportError:
    print("torch is not installed: skipping the forward-hook example (pip install torch to run it)")
    sys.exit(0)


class StandInIndexer(nn.Module):
    """q = x·Wq (heads × dim per token), k = x·Wk (one key per token), w = x·Ww
    (a weight per head), logits[t, s] = Σ_h w[t, h]·(heads·dim)^-1/2·ReLU(q[t, h]·k[s]).

    Like DeepSeek's indexer, the module scales the head weights by
    (heads·dim)^-1/2 after the projection; the hook captures the raw
    projection output, which is what dsa_recall.score takes."""

    def __init__(self, hidden=512, heads=64, dim=128):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.wq = nn.Linear(hidden, heads * dim, bias=False)
        self.wk = nn.Linear(hidden, dim, bias=False)
        self.weights_proj = nn.Linear(hidden, heads, bias=False)

    def forward(self, x):
        q = self.wq(x).view(-1, self.heads, self.dim)
        k = self.wk(x)
        w = self.weights_proj(x) * (self.heads * self.dim) ** -0.5
        return torch.einsum("th,ths->ts", w, torch.relu(torch.einsum("thd,sd->ths", q, k)))


def main():
    torch.manual_seed(0)
    indexer = StandInIndexer().eval()
    captured = {}

    def keep(name):
        def hook(module, inputs, output):
            captured[name] = output.detach()

        return hook

    handles = [
        indexer.wq.register_forward_hook(keep("q")),
        indexer.wk.register_forward_hook(keep("k")),
        indexer.weights_proj.register_forward_hook(keep("w")),
    ]
    tokens = 4096
    x = torch.randn(tokens, 512)
    with torch.no_grad():
        logits = indexer(x)
    for h in handles:
        h.remove()

    # The last 4 tokens decode against every key (as the indexer does at the
    # end of a prompt); queries reshaped to [tokens, heads, dim].
    q = captured["q"].view(tokens, indexer.heads, indexer.dim)[-4:]
    k, w = captured["k"], captured["w"][-4:]
    ours = dsa_recall.score(q, k, w, "fp32")
    print("largest |dsa_recall.score - module logits|:", float(np.abs(ours - logits[-4:].numpy()).max()))

    # Pretend the needle is the row the last query ranks 100th in fp32.
    needle = int(np.argsort(-ours[-1])[99])
    table = dsa_recall.replay(q, k, w, needle_rows=[needle], topk=[128, 512], variants=["bf16", "fp8", "fp4", "nvfp4"])
    # The columns that answer "did the needle survive, and what did each format keep?".
    shown = ["token", "topk", "precision", "selection_recall", "needle_survived", "needle_rank"]
    if hasattr(table, "to_string"):
        print(table[shown].to_string(index=False))
    else:  # without pandas: a dict of NumPy columns
        print(*shown)
        for row in zip(*(table[c] for c in shown)):
            print(*row)


if __name__ == "__main__":
    main()
