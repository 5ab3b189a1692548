"""Capture an engine's lightning indexer for ``dsa-recall check``.

``IndexerCapture`` records, for each (layer, query) pair, exactly the tensors
``check`` reads (docs/TENSORS.md, "Capture format"): the query as stored
(fp8/fp4 codes and scales, or a float query), the head weights, the layer's
indexer key-cache bytes as the engine laid them out, the query's block
table and visible rows, the engine's selected rows and, optionally, its
logits. It writes one safetensors file (``.safetensors``) or a folder of
``NAME.npy`` files with ``meta.json``; NumPy is the only dependency
(PyTorch tensors are accepted and copied to the CPU).

Two ways to record:

* ``cap.add(layer=…, kv_cache=…, block_table=…, seq_len=…, weights=…,
  q_codes=…, q_scales=…, topk_indices=…, logits=…)`` from your own code;
* ``cap.hook(module, extract)`` registers a forward hook on an indexer
  module; ``extract(module, inputs, output)`` returns the same keywords as a
  dict (one pair, or a list of dicts for several), so the hook stays
  engine-agnostic (python/examples/check_standin.py shows one).

The key cache of a layer is kept once (its latest snapshot): rows a query
can see never change after they are written, so earlier queries of the same
layer read the same bytes, as long as their blocks are not freed and reused
in between.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

__all__ = ["IndexerCapture", "save_capture"]

_SAFETENSORS_DTYPES = {
    np.dtype(np.uint8): "U8",
    np.dtype(np.int8): "I8",
    np.dtype(np.int32): "I32",
    np.dtype(np.int64): "I64",
    np.dtype(np.float16): "F16",
    np.dtype(np.float32): "F32",
    np.dtype(np.float64): "F64",
}


def _numpy(x: Any, name: str) -> np.ndarray:
    """A NumPy array from a NumPy array, a torch tensor (any device) or a list."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        t = x.detach().cpu()
        dtype = str(t.dtype)
        if "float8" in dtype or "float4" in dtype or "uint8" in dtype:
            # Bytes as stored: fp8/fp4 codes and packed caches.
            return t.contiguous().view(__import__("torch").uint8).numpy()
        if dtype == "torch.bfloat16":
            return t.float().numpy()
        return t.numpy()
    a = np.asarray(x)
    if a.dtype.kind == "V" or "float8" in a.dtype.name or "float4" in a.dtype.name:
        return a.view(np.uint8)
    return a


def _bytes_of(x: Any, name: str) -> np.ndarray:
    """The raw bytes of a cache tensor as uint8, keeping its leading axes."""
    a = np.ascontiguousarray(_numpy(x, name))
    if a.dtype != np.uint8:
        a = a.view(np.uint8)
    return a


class IndexerCapture:
    """Records (layer, query) pairs for ``dsa-recall check``.

    ``layout``: a built-in layout name (``dsa-recall check --layouts``) or
    layout TOML text; ``pipeline``: the precision variant (default: the
    layout's); ``weights``: ``"kernel"`` (what the logits kernel multiplies,
    every factor folded in: the default) or ``"raw"``; ``topk``: the
    engine's index_topk (default: the width of ``topk_indices``);
    ``index_space``: ``"logical"`` (row positions) or ``"physical"`` (cache
    slots ``block * rows_per_block + offset``).
    """

    def __init__(
        self,
        layout: str,
        *,
        pipeline: Optional[str] = None,
        weights: str = "kernel",
        topk: Optional[int] = None,
        index_space: str = "logical",
        q_format: Optional[str] = None,
        rows_per_block: Optional[int] = None,
        block_stride_bytes: Optional[int] = None,
        note: Optional[str] = None,
    ) -> None:
        if weights not in ("kernel", "raw"):
            raise ValueError(f"weights = {weights!r}: kernel or raw")
        if index_space not in ("logical", "physical"):
            raise ValueError(f"index_space = {index_space!r}: logical or physical")
        self.meta: Dict[str, Any] = {
            "layout": layout,
            "pipeline": pipeline,
            "weights": weights,
            "topk": topk,
            "index_space": index_space,
            "q_format": q_format,
            "rows_per_block": rows_per_block,
            "block_stride_bytes": block_stride_bytes,
            "note": note,
        }
        self.caches: Dict[int, np.ndarray] = {}
        self.pairs: List[Dict[str, Any]] = []
        self._hooks: List[Any] = []

    def add(
        self,
        *,
        layer: int,
        kv_cache: Any,
        block_table: Any,
        seq_len: int,
        weights: Any,
        topk_indices: Any,
        q: Any = None,
        q_codes: Any = None,
        q_scales: Any = None,
        logits: Any = None,
        query: Optional[int] = None,
    ) -> None:
        """Records one (layer, query) pair. ``kv_cache`` is the layer's whole
        indexer cache (any shape whose trailing axes are whole blocks; bytes
        as stored), ``block_table`` the query's physical block per logical
        block, ``seq_len`` the rows it sees, ``weights`` ``[heads]``, the
        query ``q_codes`` ``[heads, code bytes]`` (+ ``q_scales`` ``[heads, S]``)
        or a float ``q`` ``[heads, dim]``, ``topk_indices`` ``[k]`` (−1 pads),
        ``logits`` ``[≥ seq_len]`` when the engine exposes them."""
        if (q is None) == (q_codes is None):
            raise ValueError("give exactly one of q (a float query) and q_codes (the query as stored)")
        self.caches[int(layer)] = _bytes_of(kv_cache, "kv_cache")
        pair: Dict[str, Any] = {
            "layer": int(layer),
            "query": None if query is None else int(query),
            "seq_len": int(seq_len),
            "block_table": np.asarray(_numpy(block_table, "block_table"), dtype=np.int64).reshape(-1),
            "weights": np.asarray(_numpy(weights, "weights"), dtype=np.float32).reshape(-1),
            "topk_indices": np.asarray(_numpy(topk_indices, "topk_indices"), dtype=np.int64).reshape(-1),
        }
        if q is not None:
            pair["q"] = np.asarray(_numpy(q, "q"), dtype=np.float32)
        else:
            pair["q_codes"] = _bytes_of(q_codes, "q_codes").reshape(pair["weights"].shape[0], -1)
            if q_scales is not None:
                s = _numpy(q_scales, "q_scales")
                pair["q_scales"] = (s if s.dtype == np.uint8 else np.asarray(s, dtype=np.float32)).reshape(pair["weights"].shape[0], -1)
        if logits is not None:
            pair["logits"] = np.asarray(_numpy(logits, "logits"), dtype=np.float32).reshape(-1)
        self.pairs.append(pair)

    def hook(self, module: Any, extract: Callable[[Any, Any, Any], Union[Dict[str, Any], Sequence[Dict[str, Any]], None]]) -> Any:
        """Registers a forward hook on ``module`` (a torch ``nn.Module``): after
        each forward, ``extract(module, inputs, output)`` gives the keywords of
        ``add`` (a dict, a list of dicts, or None to skip). Returns the handle;
        ``remove()`` takes every hook off."""

        def on_forward(mod: Any, inputs: Any, output: Any) -> None:
            got = extract(mod, inputs, output)
            for pair in [got] if isinstance(got, dict) else (got or []):
                self.add(**pair)

        handle = module.register_forward_hook(on_forward)
        self._hooks.append(handle)
        return handle

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()

    def tensors(self) -> Dict[str, np.ndarray]:
        """The capture's tensors, named as docs/TENSORS.md says."""
        if not self.pairs:
            raise ValueError("nothing captured yet")
        layers = sorted(self.caches)
        axis = {l: i for i, l in enumerate(layers)}
        shapes = {self.caches[l].shape for l in layers}
        if len(shapes) != 1:
            raise ValueError(f"every layer's cache must have one shape; got {sorted(shapes)}")
        kv = self.caches[layers[0]] if len(layers) == 1 else np.stack([self.caches[l] for l in layers])
        pairs = self.pairs
        width = max(len(p["block_table"]) for p in pairs)
        table = np.full((len(pairs), width), -1, dtype=np.int64)
        for i, p in enumerate(pairs):
            table[i, : len(p["block_table"])] = p["block_table"]
        k = max(len(p["topk_indices"]) for p in pairs)
        sel = np.full((len(pairs), k), -1, dtype=np.int64)
        for i, p in enumerate(pairs):
            sel[i, : len(p["topk_indices"])] = p["topk_indices"]
        counts: Dict[int, int] = {}
        query = []
        for p in pairs:
            c = counts.get(p["layer"], 0)
            counts[p["layer"]] = c + 1
            query.append(c if p["query"] is None else p["query"])
        out: Dict[str, np.ndarray] = {
            "kv_cache": np.ascontiguousarray(kv),
            "block_table": table,
            "seq_len": np.array([p["seq_len"] for p in pairs], dtype=np.int64),
            "layer": np.array([axis[p["layer"]] for p in pairs], dtype=np.int64),
            "query": np.array(query, dtype=np.int64),
            "weights": np.stack([p["weights"] for p in pairs]).astype(np.float32),
            "topk_indices": sel,
        }
        if all("q" in p for p in pairs):
            out["q"] = np.stack([p["q"] for p in pairs]).astype(np.float32)
        elif all("q_codes" in p for p in pairs):
            out["q_codes"] = np.stack([p["q_codes"] for p in pairs])
            if all("q_scales" in p for p in pairs):
                out["q_scales"] = np.stack([p["q_scales"] for p in pairs])
        else:
            raise ValueError("every pair must carry the same query form (q, or q_codes)")
        if all("logits" in p for p in pairs):
            cols = max(len(p["logits"]) for p in pairs)
            lg = np.full((len(pairs), cols), np.nan, dtype=np.float32)
            for i, p in enumerate(pairs):
                lg[i, : len(p["logits"])] = p["logits"]
            out["logits"] = lg
        return out

    def metadata(self) -> Dict[str, Any]:
        meta = {k: v for k, v in self.meta.items() if v is not None}
        layers = sorted(self.caches)
        if layers != list(range(len(layers))):
            extra = f"kv_cache layer axis holds model layers {layers}"
            meta["note"] = f"{meta['note']}; {extra}" if "note" in meta else extra
        return meta

    def save(self, path: Union[str, "os.PathLike[str]"]) -> str:
        """Writes the capture: ``*.safetensors`` as one file, anything else as
        a folder of ``NAME.npy`` and ``meta.json``. Returns the path."""
        return save_capture(self.tensors(), self.metadata(), path)


def save_capture(tensors: Dict[str, np.ndarray], meta: Dict[str, Any], path: Union[str, "os.PathLike[str]"]) -> str:
    """Writes named tensors and the ``dsa_recall_check`` metadata."""
    p = os.fspath(path)
    meta_text = json.dumps(meta)
    allowed = "a file name ending in .safetensors, or a folder (new or existing) for NAME.npy and meta.json"
    if p.endswith(".safetensors"):
        if os.path.lexists(p) and not os.path.isfile(p):
            raise _input_error(f"invalid path = {p!r}: exists and is not a regular file; give {allowed}")
    elif os.path.lexists(p) and not os.path.isdir(p):
        raise _input_error(f"invalid path = {p!r}: exists and is not a folder; give {allowed}")
    try:
        return _write_capture(tensors, meta_text, p)
    except OSError as e:
        raise _input_error(f"cannot write the capture to {p!r}: {e.strerror or e}; give {allowed} where it can be written") from None


def _input_error(message: str) -> Exception:
    """The package's InputError (a ValueError); a plain ValueError when the
    native module is not built (this file also runs on its own)."""
    try:
        from ._native import InputError

        return InputError(message)
    except ImportError:
        return ValueError(message)


def _write_capture(tensors: Dict[str, np.ndarray], meta_text: str, p: str) -> str:
    if p.endswith(".safetensors"):
        header: Dict[str, Any] = {"__metadata__": {"dsa_recall_check": meta_text}}
        offset = 0
        blobs = []
        for name in sorted(tensors):
            a = np.ascontiguousarray(tensors[name])
            dtype = _SAFETENSORS_DTYPES.get(a.dtype)
            if dtype is None:
                raise ValueError(f"{name}: dtype {a.dtype} cannot be written (use uint8, int32/64 or float16/32/64)")
            blob = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
            header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
            offset += len(blob)
            blobs.append(blob)
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        tmp = p + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(len(text).to_bytes(8, "little"))
                f.write(text)
                for b in blobs:
                    f.write(b)
            os.replace(tmp, p)
        except BaseException:
            if os.path.isfile(tmp):
                os.remove(tmp)
            raise
        return p
    os.makedirs(p, exist_ok=True)
    for name, a in tensors.items():
        np.save(os.path.join(p, name + ".npy"), np.ascontiguousarray(a))
    with open(os.path.join(p, "meta.json"), "w", encoding="utf-8") as f:
        f.write(meta_text)
    return p
