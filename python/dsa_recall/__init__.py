"""dsa_recall: DeepSeek sparse attention's lightning indexer, simulated, from Python.

NumPy in, NumPy out. The functions:

- ``quantize(x, spec)``: element casts and block scaling (codes, scales,
  dequantized values), bit-identical to ``dsa-recall quantize`` and ml_dtypes;
- ``score(q, k, w, variant)`` and ``select(logits, k)``: the indexer's logits
  and its top-k rows;
- ``replay(q, k, w, ...)``: recorded tensors through precision variants,
  against the exact fp32 selection (``dsa-recall replay``);
- ``sweep(preset, **knobs)``: a sweep's cells as a ``SweepResult`` (the
  native result; ``.to_pandas()``, ``.to_numpy()``, ``.chart(kind)``), the
  columns of summary.csv; ``shard=(i, n)`` runs one part, ``merge`` joins
  them, ``read_sweep(dir)`` reads a sweep directory back;
- ``trial(...)``: one trial's tensors, named as ``trial --dump`` names them;
- ``check(capture, ...)``: an engine's indexer capture against the bit-exact
  reference of its declared cache layout (``dsa-recall check``); record one
  with ``IndexerCapture`` (``dsa_recall.capture``);
- ``plot(...)`` / ``plot_matplotlib(...)``: the sweep's charts;
- ``presets()``, ``hypotheses()``, ``variants()``, ``knobs()``: catalogues.

Other tables are pandas DataFrames when pandas is installed, else
``Columns`` (a dict of NumPy arrays). Errors are ``ConfigError`` and ``InputError`` (both
``ValueError``) and ``SimulationError`` (``RuntimeError``), with the command
line's one-line messages. docs/PYTHON.md in the repository has the details.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from ._native import ConfigError, Hypothesis, InputError, Preset, SimulationError, Variant
from .capture import IndexerCapture

__version__: str = _native.__version__

__all__ = [
    "ConfigError",
    "InputError",
    "SimulationError",
    "Quantized",
    "Columns",
    "TrialTensors",
    "SweepResult",
    "Preset",
    "Hypothesis",
    "Variant",
    "quantize",
    "score",
    "select",
    "replay",
    "sweep",
    "merge",
    "read_sweep",
    "trial",
    "check",
    "CheckResult",
    "IndexerCapture",
    "check_layouts",
    "plot",
    "plot_matplotlib",
    "presets",
    "hypotheses",
    "variants",
    "variant",
    "knobs",
    "scenario",
]

#: Element formats ``quantize`` casts to (anything else is a variant name).
ELEMENT_FORMATS = _native.ELEMENT_FORMATS

#: ``replay``'s variants when none are given (as ``dsa-recall replay``).
DEFAULT_REPLAY_VARIANTS = _native.DEFAULT_REPLAY_VARIANTS

# ml_dtypes' floating types: NumPy reports their kind as 'V', so they are
# recognised by name.
_ML_DTYPES_FLOATS = {
    "bfloat16",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e4m3b11fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
}


# ---------------------------------------------------------------- arrays in


def _from_foreign(x: Any, name: str) -> np.ndarray:
    """A NumPy array from a torch tensor or other DLPack producer, else np.asarray."""
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (TypeError, BufferError, RuntimeError, ValueError):
            # DLPack refused (a tensor needing grad, on a GPU, or bf16, which
            # NumPy's DLPack does not take): go through torch itself.
            if hasattr(x, "detach") and hasattr(x, "float"):
                t = x.detach()
                if not t.is_floating_point():
                    raise InputError(f"{name}: dtype {t.dtype} is not a float dtype") from None
                return t.float().cpu().numpy()
            raise
    if hasattr(x, "numpy") and callable(x.numpy):
        return np.asarray(x.numpy())
    return np.asarray(x)


def _as_f32(x: Any, name: str, allow_nonfinite: bool = False) -> np.ndarray:
    """x as a C-contiguous float32 array: the array itself when it already
    is one (zero-copy), else one conversion (exact for float16, bfloat16 and
    the float8/float4 types; float64 rounds to nearest even, as the CLI
    reads F64 tensors)."""
    a = x if isinstance(x, np.ndarray) else _from_foreign(x, name)
    dt = a.dtype
    if not (dt.kind == "f" or dt.name in _ML_DTYPES_FLOATS):
        raise InputError(
            f"{name}: dtype {dt} is not a float dtype; give float16, float32, float64 "
            "or an ml_dtypes float (bfloat16, float8_e4m3fn, …)"
        )
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not allow_nonfinite and a.size and not np.isfinite(a).all():
        i = int(np.flatnonzero(~np.isfinite(a.reshape(-1)))[0])
        raise InputError(f"{name} holds NaN or infinite values (first at flat index {i}, {a.reshape(-1)[i]})")
    return a


def _shape_error(message: str) -> InputError:
    return InputError(message)


# --------------------------------------------------------------- tables out


class Columns(dict):
    """A table without pandas: column name → NumPy array, plus ``attrs``
    (what a DataFrame's ``attrs`` would hold)."""

    attrs: Dict[str, Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.attrs: Dict[str, Any] = {}

    def __repr__(self) -> str:
        rows = len(next(iter(self.values()))) if self else 0
        names = list(self.keys())
        more = ", …" if len(names) > 6 else ""
        return f"Columns({rows} rows × {len(names)} columns: {', '.join(names[:6])}{more})"


def _pandas():
    try:
        import pandas

        return pandas
    except ImportError:
        return None


def _nan_for_none(a: np.ndarray) -> np.ndarray:
    if a.dtype != object:
        return a
    a = a.copy()
    a[np.equal(a, None)] = np.nan
    return a


def _table_from_records(records: List[Dict[str, Any]], columns: Sequence[str], attrs: Dict[str, Any]):
    pd = _pandas()
    if pd is not None:
        df = pd.DataFrame.from_records(records, columns=list(columns))
        df.attrs.update(attrs)
        return df
    out = Columns()
    for c in columns:
        vals = [r.get(c) for r in records]
        if all(isinstance(v, bool) for v in vals):
            out[c] = np.array(vals, dtype=bool)
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            out[c] = np.array(vals, dtype=np.int64)
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            out[c] = np.array(vals, dtype=np.float64)
        else:
            out[c] = np.array(vals, dtype=object)
    out.attrs.update(attrs)
    return out


# ---------------------------------------------------------------- numerics


class Quantized(NamedTuple):
    """What ``quantize`` gives: dequantized values (float32, the input's
    shape; for a variant, after its rotation, as the indexer scores them),
    codes (the bit patterns, uint8 for 8 bits or fewer, else uint16; the
    input's shape) and scales (float32, one per block; empty for a plain cast)."""

    values: np.ndarray
    codes: np.ndarray
    scales: np.ndarray


def _narrow_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    return codes.astype(np.uint8 if bits <= 8 else np.uint16 if bits <= 16 else np.uint32)


def quantize(
    x: Any,
    spec: str = "e4m3fn",
    *,
    block: Optional[int] = None,
    scale: Optional[str] = None,
    saturate: bool = False,
    amax_floor: Optional[float] = None,
    side: str = "key",
) -> Quantized:
    """Quantize ``x`` and return ``Quantized(values, codes, scales)``.

    ``spec`` is either an element format (``bf16``, ``fp16``, ``e4m3fn``,
    ``e5m2``, ``e2m1``): exactly ``dsa-recall quantize --format SPEC`` on
    ``x`` flattened in C order, with ``block`` values per scale and ``scale``
    one of ``none``, ``fp32``, ``ue8m0``, ``ue8m0-floor``, ``e4m3`` (the
    flags of the same names; no ``scale``: a plain cast, which matches
    ``x.astype(ml_dtypes.<format>)`` bit for bit) — or a precision variant
    (``fp8``, ``fp4``, ``nvfp4``, ``fp8+no-hadamard``, or a definition
    ``name=N;q=SIDE;k=SIDE``): that variant's ``side`` (``key`` or
    ``query``) pipeline applied to rows of ``x.shape[-1]`` values, as a
    sweep stores them. NaN and infinities are quantized, not refused.

    >>> import numpy as np, dsa_recall
    >>> dsa_recall.quantize(np.array([1.0, 500.0], np.float32), "e4m3fn", saturate=True).values
    array([  1., 448.], dtype=float32)
    """
    a = _as_f32(x, "x", allow_nonfinite=True)
    if spec.strip().lower() in ELEMENT_FORMATS:
        values, codes, scales, bits = _native.quantize_spec(a.reshape(-1), spec, block, scale, saturate, amax_floor)
        return Quantized(values.reshape(a.shape), _narrow_codes(codes, bits).reshape(a.shape), scales)
    if block is not None or scale is not None or saturate or amax_floor is not None:
        raise ConfigError(
            f"invalid spec = {spec!r}: block, scale, saturate and amax_floor go with an element format "
            f"({', '.join(ELEMENT_FORMATS)}); a variant brings its own"
        )
    if a.ndim == 0 or a.shape[-1] == 0:
        raise InputError(f"x has shape {a.shape}; a variant quantizes rows: give [..., dim]")
    try:
        values, codes, scales, block_len, bits = _native.quantize_variant(a.reshape(-1), spec, side, a.shape[-1])
    except ConfigError as e:
        if "invalid variant" not in str(e):
            raise
        raise ConfigError(f"{e}; or an element format: {', '.join(ELEMENT_FORMATS)}") from None
    if block_len and scales.size * block_len == a.size and a.shape[-1] % block_len == 0:
        scales = scales.reshape(a.shape[:-1] + (a.shape[-1] // block_len,))
    return Quantized(values.reshape(a.shape), _narrow_codes(codes, bits).reshape(a.shape), scales)


_U64_MAX = 2**64 - 1


def _unsigned(name: str, value: Any, low: int = 0, what: str = "an integer") -> int:
    """``value`` as an int from ``low`` to 2**64 - 1, or ``ConfigError`` (a
    ``ValueError``) naming the argument and the range, instead of PyO3's bare
    ``OverflowError``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= int(value) <= _U64_MAX:
        raise ConfigError(f"invalid {name} = {value!r}: {what} from {low} to 2**64 - 1 ({_U64_MAX})")
    return int(value)


def _queries(q: np.ndarray, w: np.ndarray, k: np.ndarray):
    """(tokens, heads, dim, rows, weights as [tokens, heads]) after shape checks."""
    if q.ndim == 2:
        tokens, (heads, dim) = 1, q.shape
    elif q.ndim == 3:
        tokens, heads, dim = q.shape
    else:
        raise _shape_error(f"q has shape {q.shape}; expected [heads, dim] or [tokens, heads, dim]")
    if k.ndim != 2 or k.shape[1] != dim:
        raise _shape_error(f"k has shape {k.shape}; expected [rows, {dim}] to match q {q.shape}")
    if w.shape == (heads,):
        w = np.ascontiguousarray(np.broadcast_to(w, (tokens, heads)))
    elif w.shape != (tokens, heads) or q.ndim == 2:
        allowed = f"[{heads}]" if q.ndim == 2 else f"[{heads}] or [{tokens}, {heads}]"
        raise _shape_error(f"w has shape {w.shape}; expected {allowed} to match q {q.shape}")
    if 0 in (tokens, heads, dim, k.shape[0]):
        raise _shape_error(f"empty tensors: q {q.shape}, k {k.shape}")
    return tokens, heads, dim, k.shape[0], w


def score(q: Any, k: Any, w: Any, variant: str = "fp32") -> np.ndarray:
    """The lightning indexer's logits Σ_h w_h·ReLU(q_h·k) of every key row.

    ``q`` is ``[heads, dim]`` (one query token) or ``[tokens, heads, dim]``,
    ``k`` is ``[rows, dim]``, ``w`` is ``[heads]`` or ``[tokens, heads]`` (the
    raw head weights). Returns float32 ``[rows]`` or ``[tokens, rows]``, as a
    sweep scores them under ``variant`` (its quantization of q and k, its
    weight and logit precision). Any float dtype is accepted (bf16 and
    float8 through ml_dtypes, torch tensors through DLPack); NaN or infinite
    inputs raise ``InputError``.
    """
    qa, ka, wa = _as_f32(q, "q"), _as_f32(k, "k"), _as_f32(w, "w")
    tokens, heads, dim, rows, wa = _queries(qa, wa, ka)
    out = _native.score(qa.reshape(-1), ka.reshape(-1), wa.reshape(-1), tokens, heads, dim, variant)
    return out if qa.ndim == 2 else out.reshape(tokens, rows)


def select(logits: Any, k: int, tie_rule: str = "lowest-index", seed: Optional[int] = None) -> np.ndarray:
    """Indices (int64, ascending) of the top ``k`` rows of ``logits`` (``[rows]``
    or ``[tokens, rows]``; ``min(k, rows)`` of them per token), as the
    indexer's kernel selects them. Equal scores are ordered by ``tie_rule``:
    ``lowest-index`` (the lower row first), ``highest-index`` or ``random``
    (a seeded order; ``seed`` as in a ``trial --dump`` file's ``trial_seed``).
    NaN logits raise ``InputError``.
    """
    la = _as_f32(logits, "logits", allow_nonfinite=True)
    if la.ndim not in (1, 2) or la.shape[-1] == 0:
        raise _shape_error(f"logits have shape {la.shape}; expected [rows] or [tokens, rows]")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError(f"invalid k = {k!r}: a positive number of rows")
    # Above the rows, k selects them all (min(k, rows)).
    k = min(_unsigned("k", k, 1, "a positive number of rows"), la.shape[-1])
    seed = None if seed is None else _unsigned("seed", seed)
    tokens = 1 if la.ndim == 1 else la.shape[0]
    if tokens == 0:
        return np.zeros((0, 0), dtype=np.int64)
    out = _native.select(la.reshape(-1), tokens, k, tie_rule, seed)
    return out if la.ndim == 1 else out.reshape(tokens, -1)


_REPLAY_COLUMNS = ("token", "topk", "k_eff", "precision", "selection_recall", "jaccard", "needle_survived", "needle_rank")


def replay(
    q: Any,
    k: Any,
    w: Any,
    needle_rows: Optional[Iterable[int]] = None,
    topk: Union[int, Sequence[int]] = 512,
    variants: Union[str, Sequence[str]] = DEFAULT_REPLAY_VARIANTS,
    agreement: Optional[Union[str, Sequence[str]]] = None,
):
    """Recorded indexer tensors through precision variants, each selection
    compared with the exact fp32 one: ``dsa-recall replay`` on arrays.

    Shapes as in ``score``, or with a leading layer axis on all three
    (``q [layers, tokens, heads, dim]`` or ``[layers, heads, dim]``,
    ``k [layers, rows, dim]``, ``w [layers, heads]`` or ``[layers, tokens,
    heads]``). One row per (layer,) token, k and variant: ``selection_recall``
    (share of the fp32 top-k also selected), ``jaccard``, and with
    ``needle_rows`` whether a needle row was selected and the best one's rank.
    Per-layer summaries (``replay --json``'s ``summary`` lines) are in
    ``.attrs["summaries"]``. With ``agreement`` (``"bf16:fp8"`` or a list of
    such pairs of fp32 and the variants) the summaries also hold one
    ``"agreement"`` line per pair and k: the share of A's top-k that B also
    selects, split into ties at the cut and real differences (``replay
    --agreement``; docs/MODEL.md, "Top-k agreement").
    Returns a DataFrame (``Columns`` without pandas).
    """
    qa, ka, wa = _as_f32(q, "q"), _as_f32(k, "k"), _as_f32(w, "w")
    topks = [_unsigned("topk", t, 1, "a positive number of rows") for t in ([topk] if isinstance(topk, (int, np.integer)) else topk)]
    names = [variants] if isinstance(variants, str) else list(variants)
    rows = None if needle_rows is None else [int(r) for r in needle_rows]
    if rows is not None and any(r < 0 for r in rows):
        raise ConfigError(f"invalid needle_rows = {rows}: row indices ≥ 0")
    pairs = agreement if agreement is None or isinstance(agreement, str) else ",".join(agreement)
    replayed = _native.replay(
        qa.reshape(-1), list(qa.shape), ka.reshape(-1), list(ka.shape), wa.reshape(-1), list(wa.shape), rows, topks, names, pairs
    )
    columns = (("layer",) if ka.ndim == 3 else ()) + _REPLAY_COLUMNS
    return _table_from_records(replayed.rows, columns, {"summaries": replayed.summaries, "json_lines": replayed.json_lines})


# ---------------------------------------------------------------- simulator


def _knob_text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        switches = _native.switch_knobs()
        if name.replace("_", "-") not in switches:
            raise ConfigError(
                f"invalid {name} = {value!r}: an integer or number as --{name.replace('_', '-')} takes it, not a bool "
                f"(True/False set the on/off knobs: {', '.join(s.replace('-', '_') for s in switches)})"
            )
        return "on" if value else "off"
    if isinstance(value, (list, tuple, range, np.ndarray)):
        return ",".join(_knob_text(name, v) for v in value)
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return str(value)


def _knob_pairs(knobs: Dict[str, Any]) -> List[tuple]:
    return [(name.replace("_", "-"), _knob_text(name, v)) for name, v in knobs.items() if v is not None]


def _path(p: Any) -> Optional[str]:
    return None if p is None else os.fspath(p)


def scenario(preset: Optional[str] = None, *, config: Any = None, precision_defs: Sequence[str] = (), **knobs: Any) -> Dict[str, Any]:
    """The resolved, checked scenario (a dict, as in a sweep's manifest.json)
    that ``sweep`` with the same arguments would run."""
    return _native.scenario(preset, _path(config), _knob_pairs(knobs), list(precision_defs))


class _Progress:
    """A progress bar fed by the sweep: tqdm (tqdm.auto, so it draws in a
    notebook) when installed, else one line on stderr rewritten in place —
    or, when stderr is not a terminal (a log, a pipe), a whole line every
    ``log_every`` seconds, as the command line does."""

    log_every = 10.0

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar = None
        self.tty = _isatty(sys.stderr)
        self.last = time.monotonic() if not self.tty else 0.0
        self.wrote = False
        self.final_written = False
        if enabled:
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=0, unit="trial", desc="sweep")
            except ImportError:
                self.bar = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            if self.bar.total != total:
                self.bar.total = total
            self.bar.n = done
            self.bar.refresh()
            return
        now = time.monotonic()
        final = bool(total) and done == total
        if final and self.final_written:
            return
        if now - self.last >= (0.5 if self.tty else self.log_every) or final:
            self.last = now
            pct = 100.0 * done / total if total else 100.0
            line = f"sweep: {done}/{total} trials ({pct:.0f} %)"
            sys.stderr.write(f"\r{line}" if self.tty else line + "\n")
            sys.stderr.flush()
            self.wrote = True
            self.final_written = final

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.tty and self.wrote:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _isatty(stream: Any) -> bool:
    """Whether ``\\r`` rewrites a line on ``stream``: a terminal, or a
    Jupyter kernel's stream (which says it is not a TTY but draws ``\\r``)."""
    if type(stream).__module__.startswith("ipykernel"):
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class SweepResult:
    """A sweep's cells: a handle on the native result (its scenario and
    cells stay in the Rust library, as a polars DataFrame keeps ``_df``),
    converted when asked.

    A read-only mapping of summary.csv's columns (``res["recall"]`` is a
    NumPy array, ``res.columns`` their names, ``len(res)`` the cells);
    ``to_pandas()`` a DataFrame, ``to_dict()`` a ``Columns`` dict,
    ``to_numpy()`` a structured array; ``chart(kind)`` a chart as the
    command line's PNG bytes, drawn from the cells without files;
    ``attrs`` what a DataFrame from ``to_pandas()`` carries (``scenario``,
    ``summary_csv``, ``results_jsonl``, ``effective_context``)."""

    __slots__ = ("_native", "_columns")

    def __init__(self, native: "_native.SweepResult") -> None:
        self._native = native
        self._columns: Optional[Dict[str, np.ndarray]] = None

    def _cols(self) -> Dict[str, np.ndarray]:
        if self._columns is None:
            # Made once, read-only: every view of the result shares them.
            self._columns = dict(self._native.columns)
            for a in self._columns.values():
                a.flags.writeable = False
        return self._columns

    @property
    def columns(self) -> List[str]:
        """The column names, in summary.csv's order."""
        return list(self._cols())

    @property
    def scenario(self) -> Dict[str, Any]:
        """The resolved scenario (manifest.json's ``scenario``)."""
        return self._native.scenario

    @property
    def out(self) -> Optional[str]:
        """The directory the sweep wrote (None: kept in memory)."""
        out = self._native.out
        return None if out is None else os.fspath(out)

    @property
    def attrs(self) -> Dict[str, Any]:
        """The scenario and the text of summary.csv, results.jsonl and
        effective_context.csv (made on each call)."""
        return {
            "scenario": self._native.scenario,
            "summary_csv": self._native.summary_csv,
            "results_jsonl": self._native.results_jsonl,
            "effective_context": self._native.effective_context_csv,
        }

    def __len__(self) -> int:
        return len(self._native)

    def __getitem__(self, column: str) -> np.ndarray:
        try:
            return self._cols()[column]
        except KeyError:
            raise KeyError(f"{column!r}: not a column; the columns are {', '.join(self._cols())}") from None

    def __contains__(self, column: object) -> bool:
        return column in self._cols()

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols())

    def keys(self) -> Iterable[str]:
        return self._cols().keys()

    def items(self) -> Iterable[Tuple[str, np.ndarray]]:
        return self._cols().items()

    def __repr__(self) -> str:
        return repr(self._native)

    def _repr_html_(self) -> Optional[str]:
        pd = _pandas()
        return None if pd is None else self.to_pandas()._repr_html_()

    def to_pandas(self):
        """A DataFrame of the columns (NaN for empty text), with ``attrs``."""
        pd = _pandas()
        if pd is None:
            raise ImportError("to_pandas needs pandas (pip install pandas); to_dict() gives the columns without it")
        df = pd.DataFrame({name: _nan_for_none(a) for name, a in self._cols().items()})
        df.attrs.update(self.attrs)
        return df

    def to_dict(self) -> "Columns":
        """The columns as ``Columns`` (name → NumPy array, None for empty text), with ``attrs``."""
        out = Columns({name: a.copy() for name, a in self._cols().items()})
        out.attrs.update(self.attrs)
        return out

    def to_numpy(self) -> np.ndarray:
        """One record per cell: a NumPy structured array of the columns."""
        cols = self._cols()
        dtype = [(name, a.dtype) for name, a in cols.items()]
        out = np.empty(len(self), dtype=dtype)
        for name, a in cols.items():
            out[name] = a
        return out

    def chart(self, kind: str = "recall_vs_context") -> bytes:
        """The chart ``kind`` as PNG bytes: what the command line writes to
        ``KIND.png`` (an unknown kind raises ``ConfigError`` listing them)."""
        return self._native.chart(kind)

    def chart_kinds(self) -> List[str]:
        """The charts this sweep draws."""
        return self._native.chart_kinds()


def sweep(
    preset: Optional[str] = None,
    *,
    config: Any = None,
    progress: bool = True,
    threads: Optional[int] = None,
    out: Any = None,
    force: bool = False,
    resume: bool = False,
    shard: Optional[Tuple[int, int]] = None,
    precision_defs: Sequence[str] = (),
    **knobs: Any,
) -> SweepResult:
    """Run a sweep and return its cells: one row per context × depth × needle
    offset × k × precision, the columns of summary.csv, the same values as
    ``dsa-recall sweep`` for the same preset, knobs and seed.

    ``preset``: a name from ``presets()`` (default deepseek-v4-flash);
    ``config``: a TOML scenario file over it. Every ``sweep`` flag is a
    keyword, with ``_`` for ``-``: ``contexts="1K..32K"`` or ``[1024, 4096]``,
    ``depths=[0, 50, 100]``, ``topk=512``, ``precisions=["fp32", "fp8"]``,
    ``trials=200``, ``seed=7``, ``needle_strength=2.0``, ``rope="v4"``,
    ``predict=True`` … (``knobs()`` lists them with their help).
    ``precision_defs``: custom variants as ``--precision-def`` takes them.
    ``threads``: worker threads (default all cores; results do not depend on it).
    ``progress``: a bar (tqdm when installed, notebooks included; else a
    line on stderr, a whole line every 10 s when stderr is not a terminal).
    ``out``: also write the command line's output directory there (results,
    summary, charts, report.html); with ``force``/``resume`` as the flags
    (``resume`` needs ``out``). ``shard=(i, n)``: only part ``i`` of ``n``
    (1 ≤ i ≤ n, as ``--shard I/N``) into ``out``; ``merge`` joins the parts.

    Returns a ``SweepResult``: the native result, with ``to_pandas()``,
    ``to_numpy()``, columns by name and ``chart(kind)``; its ``attrs`` hold
    ``scenario`` (dict), ``summary_csv``, ``results_jsonl`` and
    ``effective_context`` (text of those files).

    Ctrl-C (KeyboardInterrupt) stops the sweep within a chunk of trials
    (about 1.5 s). Bad settings raise ``ConfigError`` with the CLI's message.
    """
    if resume and out is None:
        raise ConfigError("invalid resume = True: resuming needs out= (the directory of the interrupted sweep)")
    shard_text = None if shard is None else _shard_text(shard)
    if shard_text is not None and out is None:
        raise ConfigError(f"invalid shard = {shard!r}: a shard is written to a directory; give out=")
    bar = _Progress(progress)
    try:
        swept = _native.run_sweep(
            preset,
            _path(config),
            _knob_pairs(knobs),
            list(precision_defs),
            threads,
            bar if progress else None,
            _path(out),
            force,
            resume,
            shard_text,
        )
    finally:
        bar.close()
    return SweepResult(swept)


def _shard_text(shard: Any) -> str:
    """``(i, n)`` or ``"I/N"`` as ``--shard`` takes it (the library checks the range)."""
    if isinstance(shard, str):
        return shard
    if isinstance(shard, (tuple, list)) and len(shard) == 2 and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in shard):
        return f"{int(shard[0])}/{int(shard[1])}"
    raise ConfigError(f"invalid shard = {shard!r}: (i, n) with 1 ≤ i ≤ n, or the text \"I/N\"")


def merge(shards: Sequence[Any], out: Any, *, force: bool = False) -> SweepResult:
    """``dsa-recall merge``: shard directories (from ``sweep(shard=…)`` or
    ``--shard``) into ``out``, written as an unsharded sweep writes it
    (the same bytes). Returns the whole grid's ``SweepResult``."""
    return SweepResult(_native.merge_shards([os.fspath(d) for d in shards], os.fspath(out), force))


def read_sweep(directory: Any) -> SweepResult:
    """A sweep's output directory (a whole grid's or one shard's) read back."""
    return SweepResult(_native.load_sweep(os.fspath(directory)))


class TrialTensors(dict):
    """One trial's tensors, name → NumPy array, named as ``trial --dump``
    names them (``queries``, ``weights``, ``keys``, ``needle_rows``, then per
    variant ``V.q_codes``, ``V.q_scales``, ``V.k_codes``, ``V.k_scales``,
    ``V.logits``, ``V.selected``). ``meta`` is the file's ``dsa_recall``
    metadata; ``summary`` per variant (survived, best needle rank, overlap
    with the fp32 selection)."""

    meta: Dict[str, Any]
    summary: Dict[str, Dict[str, Any]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.meta: Dict[str, Any] = {}
        self.summary: Dict[str, Dict[str, Any]] = {}

    def __repr__(self) -> str:
        return f"TrialTensors({', '.join(f'{k}{list(v.shape)}' for k, v in self.items())})"


def trial(
    preset: Optional[str] = None,
    *,
    context: Union[int, str],
    depth: float,
    topk: Optional[int] = None,
    precisions: Union[str, Sequence[str], None] = None,
    trial: int = 0,
    config: Any = None,
    precision_defs: Sequence[str] = (),
    **knobs: Any,
) -> TrialTensors:
    """Trial ``trial`` of one cell (``context`` tokens, needle at ``depth``
    percent, ``topk``) under each of ``precisions``: the tensors
    ``dsa-recall trial --dump`` writes, bit for bit, as NumPy arrays."""
    cell = [None if v is None else _knob_text(name, v) for name, v in (("context", context), ("depth", depth), ("topk", topk), ("precisions", precisions))]
    trial = _unsigned("trial", trial, 0, "a trial index")
    t = _native.run_trial(preset, _path(config), _knob_pairs(knobs), list(precision_defs), trial, *cell)
    out = TrialTensors(t.tensors)
    out.meta = t.meta
    out.summary = {v.name: {"survived": v.survived, "needle_rank": v.needle_rank, "overlap": v.overlap} for v in t.variants}
    return out


class CheckResult(dict):
    """What ``check`` found: the report as a dict (the fields of ``dsa-recall
    check --json``), plus ``verdict`` (``equal-up-to-ties`` or ``mismatch``),
    ``exit_code`` (0 or 1, as the CLI), ``text`` (the CLI's report),
    ``reproduced_by`` (fault transforms that reproduce the engine, most
    specific first) and ``pairs`` (one row per (layer, query) pair: a
    DataFrame, or ``Columns`` without pandas)."""

    text: str

    def __init__(self, report: Dict[str, Any], text: str) -> None:
        super().__init__(report)
        self.text = text

    @property
    def verdict(self) -> str:
        return self["verdict"]

    @property
    def exit_code(self) -> int:
        return int(self["exit_code"])

    @property
    def reproduced_by(self) -> List[str]:
        return list(self["reproduced_by"])

    @property
    def pairs(self):
        cols = ("pair", "layer", "query", "seq_len", "equal", "k_eff", "selected", "ties_at_cut", "within_bound_of_cut", "recall", "first_row")
        return _table_from_records(self["per_pair"], cols, {})

    def __bool__(self) -> bool:
        return self.exit_code == 0

    def __repr__(self) -> str:
        return f"CheckResult({self.verdict}, {self['pairs_equal']}/{self['pairs']} pairs equal up to ties, reproduced by {self.reproduced_by})"


def check(
    capture: Any,
    *,
    layout: Optional[str] = None,
    pipeline: Optional[str] = None,
    topk: Optional[int] = None,
    weights: Optional[str] = None,
    rows_per_block: Optional[int] = None,
    exact: bool = False,
    rounding_bits: Optional[int] = None,
    transforms: bool = True,
) -> CheckResult:
    """``dsa-recall check`` from Python: does an engine's indexer agree with
    the bit-exact reference of its declared cache layout?

    ``capture`` is a capture file (``.safetensors``) or folder (``NAME.npy``
    and ``meta.json``), or an ``IndexerCapture`` (written to a temporary file
    first, which errors call "the in-memory capture"). The keywords override the capture's metadata as the CLI's flags
    do. Returns a ``CheckResult`` (truthy when equal up to ties); bad input
    raises ``InputError``/``ConfigError`` with the CLI's one-line message.
    """
    if isinstance(capture, IndexerCapture):
        with tempfile.TemporaryDirectory(prefix="dsa-recall-check-") as tmp:
            path = capture.save(os.path.join(tmp, "capture.safetensors"))
            try:
                checked = _native.check_capture(path, layout, pipeline, topk, weights, rows_per_block, exact, rounding_bits, transforms)
            except (ConfigError, InputError, SimulationError) as e:
                # The file is ours, not the user's: name what they gave.
                raise type(e)(str(e).replace(path, "the in-memory capture").replace(tmp, "the in-memory capture")) from None
    else:
        checked = _native.check_capture(_path(capture), layout, pipeline, topk, weights, rows_per_block, exact, rounding_bits, transforms)
    return CheckResult(checked.report, checked.text)


def check_layouts() -> Dict[str, str]:
    """The built-in cache layouts of ``check``: name → TOML (with its source)."""
    return dict(_native.check_layouts())


def _sweep_result(data: Any) -> "_native.SweepResult":
    """The native result of what ``sweep()`` returned, a DataFrame from its
    ``to_pandas()`` (through its ``attrs``), or a sweep's output directory."""
    if isinstance(data, SweepResult):
        return data._native
    if isinstance(data, (str, os.PathLike)):
        d = os.fspath(data)
        if not os.path.isdir(d):
            raise InputError(f"{d}: not a sweep's output directory (no such directory)")
        return _native.load_sweep(d)
    attrs = getattr(data, "attrs", None) or {}
    if "scenario" not in attrs or "results_jsonl" not in attrs:
        raise InputError("plot takes what sweep() returned (or its to_pandas()), or a sweep's output directory")
    return _native.SweepResult.from_text(json.dumps(attrs["scenario"]), attrs["results_jsonl"])


def plot(data: Any, kind: str = "recall_vs_context", *, path: Any = None) -> bytes:
    """A chart of a sweep as PNG bytes: the charts ``dsa-recall sweep``
    draws (``kind`` is the file name without ``.png``: ``recall_vs_context``,
    ``heatmap``, ``rank_margin``, …; an unknown kind lists those available),
    drawn from the native result in memory. ``data`` is what ``sweep()``
    returned (``plot(res, kind)`` is ``res.chart(kind)``), its
    ``to_pandas()``, or a sweep's output directory. With ``path``, the PNG
    is also written there. In a notebook,
    ``IPython.display.Image(dsa_recall.plot(res))`` shows it."""
    png = _sweep_result(data).chart(kind)
    if path is not None:
        with open(os.fspath(path), "wb") as f:
            f.write(png)
    return png


def _recall_series(df: Any, model: Optional[bool]) -> Tuple[str, str]:
    """The column ``plot_matplotlib`` draws and its axis label: whole-model
    recall (the CLI's main chart leads with it) unless ``model`` is False or
    the sweep has no whole-model column (per-layer estimators)."""
    have_model = "model_recall" in df and np.isfinite(np.asarray(df["model_recall"], dtype=float)).any()
    if model is None:
        model = have_model
    if model and not have_model:
        raise ValueError("plot_matplotlib(model=True): this sweep has no whole-model recall (model_recall is empty); use model=False")
    return ("model_recall", "whole-model recall") if model else ("recall", "per-layer selection recall")


_PLOT_COLUMNS = ("context_tokens", "topk", "precision", "depth_percent", "recall")


def plot_matplotlib(df: Any, ax: Any = None, *, depth: Optional[float] = None, model: Optional[bool] = None):
    """Recall against context with matplotlib, one line per (k, precision),
    from what ``sweep()`` returned. ``model`` picks whole-model recall (the
    default, as on the CLI's main chart, when the sweep has it) or per-layer
    selection recall (``model=False``); ``depth`` picks one needle depth
    (default: the mean over the sweep's depths, said in the title). Returns
    the axes. A table without the sweep's columns raises ``InputError``
    naming those missing."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plot_matplotlib needs matplotlib (pip install matplotlib); plot(df) gives the PNG without it") from None

    missing = [c for c in _PLOT_COLUMNS if c not in df]
    if missing:
        raise InputError(
            f"plot_matplotlib: the table lacks column(s) {', '.join(missing)}; give what sweep() returned "
            f"(or its to_pandas()), which has {', '.join(_PLOT_COLUMNS)}"
        )
    col, label = _recall_series(df, model)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.5))
    ctx, k, prec, dep, rec = (np.asarray(df[c]) for c in ("context_tokens", "topk", "precision", "depth_percent", col))
    keep = np.ones(len(ctx), dtype=bool) if depth is None else dep == depth
    for kk in sorted(set(k[keep].tolist())):
        for p in dict.fromkeys(prec[keep].tolist()):
            sel = keep & (k == kk) & (prec == p)
            xs = sorted(set(ctx[sel].tolist()))
            ys = [float(np.nanmean(rec[sel & (ctx == x)].astype(float))) for x in xs]
            ax.plot(xs, ys, marker="o", label=f"k={kk} {p}")
    depths = sorted(set(dep[keep].tolist()))
    where = f"needle at depth {depths[0]:g} %" if len(depths) == 1 else "mean over needle depths " + ", ".join(f"{d:g}" for d in depths) + " %"
    scenario = getattr(df, "attrs", {}).get("scenario") or {}
    needle = scenario.get("needle_profile") if isinstance(scenario, dict) else None
    if needle:
        where += f", {needle} needle"
    ax.set_title(f"{label} vs context, {where}", fontsize="medium")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel(label)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return ax


# ---------------------------------------------------------------- catalogues


def presets() -> List[Preset]:
    """The embedded presets (``dsa-recall presets``)."""
    return _native.presets()


def hypotheses() -> List[Hypothesis]:
    """The hypothesis catalogue (``dsa-recall hypotheses``)."""
    return _native.hypotheses()


def variants() -> List[Variant]:
    """The built-in precision variants."""
    return _native.variants(None, 128)


def variant(spec: str, dim: int = 128) -> Variant:
    """One variant: a built-in name, ``BASE+HYPOTHESIS…``, or a definition
    ``name=N;q=SIDE;k=SIDE;logits=…;weights=…`` (as ``--precision-def``),
    checked for vectors of ``dim``."""
    (v,) = _native.variants(spec, dim)
    return v


def knobs() -> List[tuple]:
    """Every keyword ``sweep`` takes besides its own: (keyword, TOML path, help)."""
    return [(k.flag.replace("-", "_"), k.path, k.help) for k in _native.knobs()]
