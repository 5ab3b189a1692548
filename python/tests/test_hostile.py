"""Issue 30, items 10 and 15: bad arguments raise a ValueError naming the
argument, the value and what is allowed (not PyO3's bare OverflowError),
and the wheel's extension is stripped."""

import numpy as np
import pytest

import dsa_recall as d


@pytest.fixture(scope="module")
def logits():
    rng = np.random.default_rng(0)
    return rng.standard_normal(300).astype(np.float32)


def test_negative_seed_and_huge_k_name_the_argument(logits):
    with pytest.raises(ValueError, match=r"invalid seed = -1: an integer from 0 to 2\*\*64 - 1"):
        d.select(logits, 5, tie_rule="random", seed=-1)
    with pytest.raises(ValueError, match=r"invalid k = 1180591620717411303424: a positive number of rows from 1 to 2\*\*64 - 1"):
        d.select(logits, 2**70)
    assert d.select(logits, 2**40).shape == (300,)  # above the rows: all of them, as documented


def test_negative_trial_names_the_argument():
    with pytest.raises(ValueError, match=r"invalid trial = -1: a trial index from 0 to 2\*\*64 - 1"):
        d.trial(context=4096, depth=50, topk=512, precisions="fp8", trial=-1)


def test_a_bool_for_a_number_knob_is_refused():
    with pytest.raises(d.ConfigError, match=r"invalid trials = True: an integer or number as --trials takes it, not a bool"):
        d.sweep(contexts="4K", trials=True, progress=False)


def test_replay_refuses_no_variants_and_a_topk_above_the_rows():
    q, k, w = np.ones((4, 128), np.float32), np.ones((50, 128), np.float32), np.ones(4, np.float32)
    with pytest.raises(d.ConfigError, match=r"invalid --precisions = \(none\): one or more of "):
        d.replay(q, k, w, variants=[])
    with pytest.raises(d.ConfigError, match=r"invalid --topk = 99999: a top-k from 1 to 50, the key rows of the capture"):
        d.replay(q, k, w, topk=99999)


def test_quantize_lists_element_formats_too():
    with pytest.raises(d.ConfigError, match=r'invalid variant = "e4m3": .*; or an element format: bf16, fp16, f16, e4m3fn, e5m2, e2m1'):
        d.quantize(np.ones(128, np.float32), "e4m3")


def _elf_section_names(data):
    """Section names of a little-endian ELF64 file."""
    import struct

    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [data[shoff + i * shentsize : shoff + (i + 1) * shentsize] for i in range(shnum)]
    str_off, str_size = struct.unpack_from("<QQ", headers[shstrndx], 0x18)
    table = data[str_off : str_off + str_size]
    names = []
    for h in headers:
        start, = struct.unpack_from("<I", h, 0)
        names.append(table[start : table.index(b"\0", start)].decode())
    return names


def test_the_extension_is_stripped():
    """Item 15: the release profile's line tables (debug = 1, for callgrind)
    must not ship in the wheel: no .debug_* sections, no symbol table."""
    path = d._native.__file__
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(b"\x7fELF\x02\x01"):
        pytest.skip("not a little-endian ELF64 extension")
    names = _elf_section_names(data)
    assert ".text" in names, names
    kept = [n for n in names if n.startswith(".debug") or n == ".symtab"]
    assert not kept, f"{path} is not stripped ({len(data) >> 20} MB): {kept}"
