# The compiled module's functions and result types; use the wrappers in dsa_recall
# instead. python/tests/test_stubs.py checks these stubs against the module.
from typing import Any, Callable, Dict, List, Optional, Tuple, final

import numpy as np

__version__: str
ELEMENT_FORMATS: Tuple[str, ...]
DEFAULT_REPLAY_VARIANTS: Tuple[str, ...]

class ConfigError(ValueError): ...
class InputError(ValueError): ...
class SimulationError(RuntimeError): ...

def quantize_spec(x: np.ndarray, format: str, block: Optional[int] = None, scale: Optional[str] = None, saturate: bool = False, amax_floor: Optional[float] = None) -> Tuple[np.ndarray, np.ndarray, np.ndarray, int]: ...
def quantize_variant(x: np.ndarray, variant: str, side: str, dim: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, int, int]: ...
def score(q: np.ndarray, k: np.ndarray, w: np.ndarray, tokens: int, heads: int, dim: int, variant: str) -> np.ndarray: ...
def select(logits: np.ndarray, tokens: int, k: int, tie_rule: str = "lowest-index", seed: Optional[int] = None) -> np.ndarray: ...

@final
class Replayed:
    rows: List[Dict[str, Any]]
    json_lines: List[str]
    summaries: List[Dict[str, Any]]

def replay(q: np.ndarray, q_shape: List[int], k: np.ndarray, k_shape: List[int], w: np.ndarray, w_shape: List[int], needle_rows: Optional[List[int]], topks: List[int], variants: List[str]) -> Replayed: ...
def scenario(preset: Optional[str] = None, config: Optional[str] = None, knobs: List[Tuple[str, str]] = ..., precision_defs: List[str] = ...) -> Dict[str, Any]: ...

@final
class SweepResult:
    columns: Dict[str, np.ndarray]
    scenario: Dict[str, Any]
    summary_csv: str
    results_jsonl: str
    effective_context_csv: str

def run_sweep(preset: Optional[str] = None, config: Optional[str] = None, knobs: List[Tuple[str, str]] = ..., precision_defs: List[str] = ..., threads: Optional[int] = None, progress: Optional[Callable[[int, int], Any]] = None, out: Optional[str] = None, force: bool = False, resume: bool = False) -> SweepResult: ...

@final
class TrialVariant:
    name: str
    survived: bool
    needle_rank: Optional[int]
    overlap: float

@final
class Trial:
    tensors: Dict[str, np.ndarray]
    meta: Dict[str, Any]
    variants: List[TrialVariant]

def run_trial(preset: Optional[str] = None, config: Optional[str] = None, knobs: List[Tuple[str, str]] = ..., precision_defs: List[str] = ..., trial: int = 0, context: Optional[str] = None, depth: Optional[str] = None, topk: Optional[str] = None, precisions: Optional[str] = None) -> Trial: ...
def render_charts(scenario_json: str, results_jsonl: str, dir: str, kind: Optional[str] = None) -> List[str]: ...

@final
class Preset:
    name: str
    description: str
    toml: str

def presets() -> List[Preset]: ...

@final
class Hypothesis:
    name: str
    group: str
    summary: str
    changes: str
    stands_for: str
    expected: str
    requires: Optional[str]
    layers: str
    text: str

def hypotheses() -> List[Hypothesis]: ...

@final
class Variant:
    name: str
    description: str
    definition: Dict[str, Any]

def variants(spec: Optional[str] = None, dim: int = 128) -> List[Variant]: ...

@final
class Knob:
    flag: str
    path: str
    help: str

def knobs() -> List[Knob]: ...
def switch_knobs() -> List[str]: ...
@final
class CheckReport:
    report: Dict[str, Any]
    text: str
    exit_code: int

def check_capture(path: str, layout: Optional[str] = None, pipeline: Optional[str] = None, topk: Optional[int] = None, weights: Optional[str] = None, rows_per_block: Optional[int] = None, exact: bool = False, rounding_bits: Optional[int] = None, transforms: bool = True) -> CheckReport: ...
def check_layouts() -> List[Tuple[str, str]]: ...
