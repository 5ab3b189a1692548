"""dsa_recall.check and IndexerCapture (issue 29): a capture written from
NumPy in sglang's V3.2 fp8 layout (pages of 64 rows: 64 x 128 e4m3fn code
bytes, then 64 fp32 scales), scored by a NumPy engine; healthy, with a
slot-shift reader, and malformed; the same verdict as the CLI."""

import numpy as np
import pytest

import dsa_recall as dr

ml_dtypes = pytest.importorskip("ml_dtypes")

D, RPB, HEADS = 128, 64, 8


def make_cache(rng, rows, spare=3):
    """Keys, their codes and scales, and a paged cache in the sglang layout."""
    keys = (rng.standard_normal((rows, D)) * np.exp(0.5 * rng.standard_normal((rows, 1)))).astype(np.float32)
    scales = (np.abs(keys).max(axis=1) / 448.0).astype(np.float32)
    codes = (keys / scales[:, None]).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    used = -(-rows // RPB)
    blocks = used + spare
    table = rng.permutation(blocks)[:used]
    cache = rng.integers(0, 256, size=(blocks, RPB * (D + 4)), dtype=np.uint8)
    for r in range(rows):
        b, s = table[r // RPB], r % RPB
        cache[b, s * D : (s + 1) * D] = codes[r]
        cache[b, RPB * D + 4 * s : RPB * D + 4 * s + 4] = np.frombuffer(scales[r : r + 1].tobytes(), np.uint8)
    return cache, table


def read_rows(cache, table, rows, shift=0):
    """Element values and scales of rows 0..rows-1, slot s read from s + shift."""
    vals = np.empty((rows, D), np.float32)
    sc = np.empty(rows, np.float32)
    for r in range(rows):
        b, s = table[r // RPB], (r % RPB + shift) % RPB
        vals[r] = cache[b, s * D : (s + 1) * D].view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        sc[r] = cache[b, RPB * D + 4 * s : RPB * D + 4 * s + 4].view(np.float32)[0]
    return vals, sc


def capture(seed=0, shift=0, layers=2, rows=700, k=48):
    rng = np.random.default_rng(seed)
    cap = dr.IndexerCapture("sglang-v32-fp8", pipeline="fp8", topk=k, note="numpy test")
    for layer in range(layers):
        cache, table = make_cache(rng, rows)
        q = rng.standard_normal((HEADS, D)).astype(np.float32)
        q_scale = (np.abs(q).max(axis=1) / 448.0).astype(np.float32)
        q_codes = (q / q_scale[:, None]).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        w = (rng.standard_normal(HEADS) * (HEADS * D) ** -0.5 * q_scale).astype(np.float32)
        vals, sc = read_rows(cache, table, rows, shift)
        qv = q_codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        logits = (np.maximum(qv @ vals.T, 0) * w[:, None]).sum(axis=0) * sc
        top = np.argsort(-logits, kind="stable")[:k]
        cap.add(layer=layer, kv_cache=cache, block_table=table, seq_len=rows, weights=w, q_codes=q_codes, q_scales=q_scale, topk_indices=top)
    return cap


def test_a_healthy_numpy_engine_is_equal_up_to_ties(tmp_path):
    r = dr.check(capture())
    assert r and r.exit_code == 0 and r.verdict == "equal-up-to-ties", r.text
    assert r["pairs"] == 2 and r["recall_min"] == 1.0
    assert len(r.pairs["pair"]) == 2
    # Same file, same verdict, from the CLI's folder form too.
    path = capture().save(tmp_path / "cap")
    assert dr.check(path).exit_code == 0


def test_a_slot_shift_is_a_mismatch_named_by_its_transform():
    r = dr.check(capture(shift=1))
    assert not r and r.exit_code == 1, r.text
    assert r.reproduced_by[0] == "slot-shift", r.text
    assert r["first_divergence"]["layer"] == 0
    assert "slot-shift" in r.text


def test_the_cli_gives_the_same_verdict(cli, tmp_path):
    for shift, code in ((0, 0), (1, 1)):
        path = capture(shift=shift).save(tmp_path / f"cap{shift}.safetensors")
        out = cli("check", path, check=False)
        assert out.returncode == code, out.stdout + out.stderr
        assert dr.check(path).exit_code == code


def test_malformed_captures_raise_one_line_naming_the_tensor(tmp_path):
    cap = capture(layers=1)
    t = cap.tensors()
    t["kv_cache"] = t["kv_cache"][:, :-100]
    path = dr.capture.save_capture(t, cap.metadata(), tmp_path / "short.safetensors")
    with pytest.raises(dr.InputError) as e:
        dr.check(path)
    assert "tensor kv_cache" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(dr.InputError, match="topk_indices"):
        t = cap.tensors()
        t["topk_indices"][0, 0] = 10**6
        dr.check(dr.capture.save_capture(t, cap.metadata(), tmp_path / "past.safetensors"))
    assert "sglang-v32-fp8" in dr.check_layouts()
