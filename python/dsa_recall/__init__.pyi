# Type stubs of the dsa_recall package (docs/PYTHON.md).
from os import PathLike
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

ArrayLike = Union[npt.ArrayLike, Any]  # NumPy arrays (any float dtype, ml_dtypes included), torch tensors, DLPack producers
Table = Any  # pandas.DataFrame when pandas is installed, else Columns
PathType = Union[str, "PathLike[str]"]

ELEMENT_FORMATS: Tuple[str, ...]
DEFAULT_REPLAY_VARIANTS: Tuple[str, ...]

class ConfigError(ValueError): ...
class InputError(ValueError): ...
class SimulationError(RuntimeError): ...

class Columns(Dict[str, np.ndarray]):
    attrs: Dict[str, Any]

class Quantized(NamedTuple):
    values: npt.NDArray[np.float32]
    codes: npt.NDArray[np.unsignedinteger[Any]]
    scales: npt.NDArray[np.float32]

class TrialTensors(Dict[str, np.ndarray]):
    meta: Dict[str, Any]
    summary: Dict[str, Dict[str, Any]]

class Preset(NamedTuple):
    name: str
    description: str
    toml: str
    def scenario(self) -> Dict[str, Any]: ...

class Hypothesis(NamedTuple):
    name: str
    group: str
    summary: str
    changes: str
    stands_for: str
    expected: str
    requires: Optional[str]
    layers: str
    text: str

class Variant(NamedTuple):
    name: str
    description: str
    definition: Dict[str, Any]

def quantize(
    x: ArrayLike,
    spec: str = "e4m3fn",
    *,
    block: Optional[int] = None,
    scale: Optional[str] = None,
    saturate: bool = False,
    amax_floor: Optional[float] = None,
    side: str = "key",
) -> Quantized: ...
def score(q: ArrayLike, k: ArrayLike, w: ArrayLike, variant: str = "fp32") -> npt.NDArray[np.float32]: ...
def select(logits: ArrayLike, k: int, tie_rule: str = "lowest-index", seed: Optional[int] = None) -> npt.NDArray[np.int64]: ...
def replay(
    q: ArrayLike,
    k: ArrayLike,
    w: ArrayLike,
    needle_rows: Optional[Iterable[int]] = None,
    topk: Union[int, Sequence[int]] = 512,
    variants: Union[str, Sequence[str]] = ...,
) -> Table: ...
def scenario(preset: Optional[str] = None, *, config: Optional[PathType] = None, precision_defs: Sequence[str] = (), **knobs: Any) -> Dict[str, Any]: ...
def sweep(
    preset: Optional[str] = None,
    *,
    config: Optional[PathType] = None,
    progress: bool = True,
    threads: Optional[int] = None,
    out: Optional[PathType] = None,
    force: bool = False,
    resume: bool = False,
    precision_defs: Sequence[str] = (),
    **knobs: Any,
) -> Table: ...
def trial(
    preset: Optional[str] = None,
    *,
    context: Union[int, str],
    depth: float,
    topk: Optional[int] = None,
    precisions: Union[str, Sequence[str], None] = None,
    trial: int = 0,
    config: Optional[PathType] = None,
    precision_defs: Sequence[str] = (),
    **knobs: Any,
) -> TrialTensors: ...
class CheckResult(Dict[str, Any]):
    text: str
    @property
    def verdict(self) -> str: ...
    @property
    def exit_code(self) -> int: ...
    @property
    def reproduced_by(self) -> List[str]: ...
    @property
    def pairs(self) -> Table: ...
    def __bool__(self) -> bool: ...

class IndexerCapture:
    meta: Dict[str, Any]
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
    ) -> None: ...
    def add(
        self,
        *,
        layer: int,
        kv_cache: ArrayLike,
        block_table: ArrayLike,
        seq_len: int,
        weights: ArrayLike,
        topk_indices: ArrayLike,
        q: Optional[ArrayLike] = None,
        q_codes: Optional[ArrayLike] = None,
        q_scales: Optional[ArrayLike] = None,
        logits: Optional[ArrayLike] = None,
        query: Optional[int] = None,
    ) -> None: ...
    def hook(self, module: Any, extract: Callable[[Any, Any, Any], Any]) -> Any: ...
    def remove(self) -> None: ...
    def tensors(self) -> Dict[str, np.ndarray]: ...
    def metadata(self) -> Dict[str, Any]: ...
    def save(self, path: PathType) -> str: ...

def check(
    capture: Union[PathType, IndexerCapture],
    *,
    layout: Optional[str] = None,
    pipeline: Optional[str] = None,
    topk: Optional[int] = None,
    weights: Optional[str] = None,
    rows_per_block: Optional[int] = None,
    exact: bool = False,
    rounding_bits: Optional[int] = None,
    transforms: bool = True,
) -> CheckResult: ...
def check_layouts() -> Dict[str, str]: ...
def plot(data: Union[Table, PathType], kind: str = "recall_vs_context", *, path: Optional[PathType] = None) -> bytes: ...
def plot_matplotlib(df: Table, ax: Any = None, *, depth: Optional[float] = None, model: Optional[bool] = None) -> Any: ...
def presets() -> List[Preset]: ...
def hypotheses() -> List[Hypothesis]: ...
def variants() -> List[Variant]: ...
def variant(spec: str, dim: int = 128) -> Variant: ...
def knobs() -> List[Tuple[str, str, str]]: ...
