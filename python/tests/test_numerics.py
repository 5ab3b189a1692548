"""quantize, score and select (issue 19, API items 1–2): against ml_dtypes,
the CLI's `quantize`, and a `trial --dump` of the same numbers."""

import numpy as np
import pytest

import dsa_recall as d

ml_dtypes = pytest.importorskip("ml_dtypes")

# (our format, the ml_dtypes/NumPy type, unsigned view of the same width)
CASTS = [
    ("e4m3fn", ml_dtypes.float8_e4m3fn, np.uint8),
    ("e5m2", ml_dtypes.float8_e5m2, np.uint8),
    ("bf16", ml_dtypes.bfloat16, np.uint16),
    ("fp16", np.float16, np.uint16),
]
if hasattr(ml_dtypes, "float4_e2m1fn"):
    CASTS.append(("e2m1", ml_dtypes.float4_e2m1fn, np.uint8))


def awkward_values(n=20000, seed=0):
    """Values over many binades, ties, subnormals, ±0, ±inf and NaN."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 448.0, 464.0, 480.0, 57344.0, 61440.0, 65520.0, 6.0, 7.0, 1e-45, 2.0**-10]
    return np.concatenate([x, specials, -np.array(specials)]).astype(np.float32)


def same_bits(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32))


@pytest.mark.parametrize("fmt,ml,uint", CASTS, ids=[c[0] for c in CASTS])
def test_plain_casts_are_bit_identical_to_ml_dtypes(fmt, ml, uint):
    x = awkward_values()
    if fmt == "e2m1":
        x = x[np.isfinite(x)]  # float4_e2m1fn has no NaN or inf to cast to
    q = d.quantize(x, fmt)
    with np.errstate(over="ignore"):
        ref = x.astype(ml)
    bits = ref.view(uint)
    if fmt == "e2m1":
        bits = bits & 0xF
    assert np.array_equal(q.codes.astype(np.uint32), bits.astype(np.uint32))
    assert same_bits(q.values, ref.astype(np.float32))
    assert q.scales.size == 0 and q.codes.shape == x.shape


def parse_cli_lines(text):
    values, codes = [], []
    for line in text.split():
        if line.startswith("0x"):
            codes.append(int(line, 16))
        else:
            values.append(np.float32(float(line)))
    return np.array(values, np.float32), np.array(codes)


@pytest.mark.parametrize(
    "flags",
    [
        ("e4m3fn",),
        ("e5m2", "--saturate"),
        ("e2m1", "--block", "32", "--scale", "ue8m0"),
        ("e2m1", "--block", "16", "--scale", "e4m3"),
        ("e4m3fn", "--block", "128", "--scale", "fp32"),
        ("e2m1", "--block", "32", "--scale", "ue8m0-floor", "--amax-floor", "0.5"),
    ],
)
def test_quantize_matches_the_cli(cli, flags):
    x = awkward_values(4000, seed=1)
    x = x[np.isfinite(x)][:3000]
    fmt, rest = flags[0], flags[1:]
    kw = {}
    it = iter(rest)
    for f in it:
        if f == "--saturate":
            kw["saturate"] = True
        else:
            kw[f[2:].replace("-", "_")] = next(it)
    kw = {k: (int(v) if k == "block" else float(v) if k == "amax_floor" else v) for k, v in kw.items()}
    q = d.quantize(x, fmt, **kw)
    r = cli("quantize", "--format", fmt, "--codes", *rest, stdin="\n".join(repr(float(v)) for v in x))
    values, codes = parse_cli_lines(r.stdout)
    assert same_bits(q.values, values)
    assert np.array_equal(q.codes.astype(np.int64), codes)


def test_block_scales_times_ml_dtypes_codes_give_the_values():
    """The scales returned are the ones applied: each block's values are its
    codes (decoded by ml_dtypes) times its scale."""
    x = awkward_values(4096, seed=2)
    x = x[np.isfinite(x)][:4096]
    x = x[: len(x) // 32 * 32]
    q = d.quantize(x, "e2m1", block=32, scale="ue8m0")
    assert q.scales.shape == (len(x) // 32,)
    decoded = q.codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32) if hasattr(ml_dtypes, "float4_e2m1fn") else None
    if decoded is not None:
        assert same_bits(q.values, decoded * np.repeat(q.scales, 32))


@pytest.fixture(scope="module")
def dumped():
    """One simulated trial: tensors and the variants' codes, logits, selections."""
    return d.trial(context=8192, depth=40, topk=512, precisions="fp32,bf16,fp8,fp4,nvfp4", trial=3)


@pytest.mark.parametrize("variant", ["bf16", "fp8", "fp4", "nvfp4"])
def test_variant_quantize_score_and_select_match_the_dump(dumped, variant):
    t = dumped
    qz = d.quantize(t["keys"], variant)
    assert np.array_equal(qz.codes, t[f"{variant}.k_codes"])
    if f"{variant}.k_scales" in t:
        assert same_bits(qz.scales, t[f"{variant}.k_scales"])
    qq = d.quantize(t["queries"], variant, side="query")
    assert np.array_equal(qq.codes, t[f"{variant}.q_codes"])
    logits = d.score(t["queries"], t["keys"], t["weights"], variant)
    assert same_bits(logits, t[f"{variant}.logits"])
    sel = d.select(logits, t.meta["topk"], tie_rule=t.meta["tie_rule"].replace("_", "-"), seed=t.meta["trial_seed"])
    assert np.array_equal(sel, t[f"{variant}.selected"])


def test_many_tokens_score_like_one_at_a_time():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((3, 8, 128)).astype(np.float32)
    k = rng.standard_normal((300, 128)).astype(np.float32)
    w = rng.standard_normal((3, 8)).astype(np.float32)
    both = d.score(q, k, w, "fp8")
    assert both.shape == (3, 300)
    for t in range(3):
        assert same_bits(both[t], d.score(q[t], k, w[t], "fp8"))
    sel = d.select(both, 10)
    assert sel.shape == (3, 10) and np.array_equal(sel[1], d.select(both[1], 10))
    shared_w = d.score(q, k, w[0], "fp32")
    assert same_bits(shared_w[2], d.score(q[2], k, w[0], "fp32"))


def test_any_float_dtype_is_accepted_and_read_exactly():
    rng = np.random.default_rng(6)
    q = rng.standard_normal((4, 32)).astype(ml_dtypes.bfloat16)
    k = rng.standard_normal((50, 32)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal(4).astype(np.float16)
    ref = d.score(q.astype(np.float32), k.astype(np.float32), w.astype(np.float32))
    assert same_bits(d.score(q, k, w), ref)
    assert same_bits(d.score(q.astype(np.float64), k.astype(np.float64), w.astype(np.float64)), ref)
    # Non-contiguous views are copied, not refused.
    k2 = np.asfortranarray(k.astype(np.float32))
    assert same_bits(d.score(q, k2, w), ref)
    assert same_bits(d.score(q.tolist(), k.astype(np.float32).tolist(), w.astype(np.float32).tolist()), ref)


def test_float32_contiguous_input_is_not_copied():
    a = np.ones((4, 8), np.float32)
    assert d._as_f32(a, "a") is a
    assert d._as_f32(a.T, "a") is not a


class DLPackOnly:
    """Exposes an array through DLPack alone (as torch and JAX tensors do)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_producers_are_accepted():
    rng = np.random.default_rng(7)
    q, k, w = (rng.standard_normal(s).astype(np.float32) for s in ((4, 16), (20, 16), (4,)))
    assert same_bits(d.score(DLPackOnly(q), DLPackOnly(k), DLPackOnly(w)), d.score(q, k, w))


def test_torch_tensors_are_accepted():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    q, k, w = (rng.standard_normal(s).astype(np.float32) for s in ((4, 16), (20, 16), (4,)))
    ref = d.score(q, k, w)
    assert same_bits(d.score(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(w)), ref)
    qb = torch.from_numpy(q).to(torch.bfloat16).requires_grad_(True)
    assert same_bits(d.score(qb, k, w), d.score(qb.detach().float().numpy(), k, w))


@pytest.mark.parametrize(
    "q,k,w,message",
    [
        ((4, 16), (20, 8), (4,), "k has shape (20, 8)"),
        ((16,), (20, 16), (4,), "q has shape (16,)"),
        ((4, 16), (20, 16), (5,), "w has shape (5,)"),
        ((2, 4, 16), (20, 16), (3, 4), "w has shape (3, 4)"),
        ((4, 16), (0, 16), (4,), "empty tensors"),
    ],
)
def test_bad_shapes_raise_a_clear_value_error(q, k, w, message):
    z = lambda s: np.zeros(s, np.float32)  # noqa: E731
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        d.score(z(q), z(k), z(w))


def test_bad_dtypes_and_nan_raise_value_errors():
    q, k, w = np.ones((2, 8), np.float32), np.ones((5, 8), np.float32), np.ones(2, np.float32)
    with pytest.raises(d.InputError, match="dtype int64 is not a float dtype"):
        d.score(q, np.ones((5, 8), np.int64), w)
    with pytest.raises(ValueError, match="dtype complex64"):
        d.quantize(np.ones(3, np.complex64))
    bad = k.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"k holds NaN or infinite values \(first at flat index 26"):
        d.score(q, bad, w)
    with pytest.raises(ValueError, match="logits hold NaN"):
        d.select(np.array([1.0, np.nan, 0.0], np.float32), 1)
    with pytest.raises(d.ConfigError, match='invalid variant = "fp7"'):
        d.score(q, k, w, "fp7")
    with pytest.raises(d.ConfigError, match="tie_rule"):
        d.select(np.zeros(4, np.float32), 2, tie_rule="first")
    with pytest.raises(d.ConfigError, match="invalid k = 0"):
        d.select(np.zeros(4, np.float32), 0)


def test_ties_follow_the_rule():
    flat = np.zeros(10, np.float32)
    assert d.select(flat, 3).tolist() == [0, 1, 2]
    assert d.select(flat, 3, tie_rule="highest-index").tolist() == [7, 8, 9]
    assert d.select(flat, 30).tolist() == list(range(10))
    a = d.select(flat, 3, tie_rule="random", seed=11)
    assert a.tolist() == d.select(flat, 3, tie_rule="random", seed=11).tolist()


def test_quantize_errors_are_the_cli_messages(cli):
    from conftest import cli_error

    with pytest.raises(d.ConfigError) as e:
        d.quantize(np.ones(4, np.float32), "e2m1", block=32)
    assert str(e.value) == cli_error(cli, "quantize", "--format", "e2m1", "--block", "32", "1")
    with pytest.raises(d.ConfigError) as e:
        d.quantize(np.ones(4, np.float32), "e2m1", scale="ue9")
    assert str(e.value) == cli_error(cli, "quantize", "--format", "e2m1", "--scale", "ue9", "1")
