"""sweep, trial, replay, plot and the catalogues (issue 19, API items 3–6):
the same results as the CLI for the same inputs and seed, and its errors."""

import json
import os
import signal
import struct
import threading
import time

import numpy as np
import pytest

import dsa_recall as d
from conftest import cli_error

pd = pytest.importorskip("pandas")

# A small grid: 2 contexts × 2 depths × 1 k × 2 precisions.
GRID = dict(contexts="1K,4K", depths=[0, 60], topk=512, precisions=["fp32", "fp8"], trials=40, seed=3)
GRID_FLAGS = ["--contexts", "1K,4K", "--depths", "0,60", "--topk", "512", "--precisions", "fp32,fp8", "--trials", "40", "--seed", "3"]


@pytest.fixture(scope="module")
def cli_sweep(cli, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    cli("sweep", "--out", out, "--force", "--threads", "1", *GRID_FLAGS)
    return out


def test_sweep_equals_the_cli_summary(cli_sweep):
    df = d.sweep(progress=False, threads=2, **GRID).to_pandas()
    text = (cli_sweep / "summary.csv").read_text()
    assert df.attrs["summary_csv"] == text
    assert df.attrs["results_jsonl"] == (cli_sweep / "results.jsonl").read_text()
    assert df.attrs["effective_context"] == (cli_sweep / "effective_context.csv").read_text()
    ref = pd.read_csv(cli_sweep / "summary.csv")
    assert list(df.columns) == list(ref.columns)
    pd.testing.assert_frame_equal(df, ref, check_exact=True)
    manifest = json.loads((cli_sweep / "manifest.json").read_text())
    assert df.attrs["scenario"] == manifest["scenario"]


def test_sweep_without_pandas_gives_the_same_columns(monkeypatch, cli_sweep):
    monkeypatch.setattr(d, "_pandas", lambda: None)
    with pytest.raises(ImportError, match="to_pandas needs pandas"):
        d.sweep(progress=False, **GRID).to_pandas()
    cols = d.sweep(progress=False, **GRID).to_dict()
    assert isinstance(cols, d.Columns)
    ref = pd.read_csv(cli_sweep / "summary.csv")
    assert list(cols) == list(ref.columns)
    for name in ref.columns:
        a, b = cols[name], ref[name].to_numpy()
        if b.dtype.kind == "f":
            assert np.array_equal(a.astype(float), b, equal_nan=True), name
        else:
            # Empty text fields: None here, NaN in pandas.
            assert a.tolist() == [None if isinstance(x, float) and np.isnan(x) else x for x in b.tolist()], name


def test_sweep_into_a_directory_writes_the_cli_files(cli_sweep, tmp_path):
    d.sweep(progress=False, out=tmp_path / "s", **GRID)
    for name in ("results.jsonl", "summary.csv", "effective_context.csv"):
        assert (tmp_path / "s" / name).read_bytes() == (cli_sweep / name).read_bytes(), name
    assert (tmp_path / "s" / "report.html").is_file()
    with pytest.raises(d.InputError, match="is not empty; pass --force"):
        d.sweep(progress=False, out=tmp_path / "s", **GRID)


@pytest.mark.parametrize(
    "knobs,flags",
    [
        (dict(contexts="abc"), ["--contexts", "abc"]),
        (dict(precisions="fp32,fp7"), ["--precisions", "fp32,fp7"]),
        (dict(needle_strength=-1.0), ["--needle-strength", "-1.0"]),
        (dict(depths=[0, 101]), ["--depths", "0,101"]),
        (dict(rope="v5"), ["--rope", "v5"]),
        (dict(preset="deepseek-v9"), ["--preset", "deepseek-v9"]),
        (dict(threads=0), ["--threads", "0"]),
        (dict(trials=0), ["--trials", "0"]),
    ],
)
def test_sweep_errors_are_the_cli_messages(cli, tmp_path, knobs, flags):
    with pytest.raises(d.ConfigError) as e:
        d.sweep(progress=False, **knobs)
    assert isinstance(e.value, ValueError)
    assert str(e.value) == cli_error(cli, "sweep", "--out", tmp_path / "x", *flags)
    assert not (tmp_path / "x").exists()


def test_unknown_knobs_are_named():
    with pytest.raises(d.ConfigError, match='invalid knob = "needle-strenght": one of .*needle-strength'):
        d.sweep(progress=False, needle_strenght=2.0)


def test_progress_reaches_the_callback_and_an_exception_stops_the_sweep():
    seen = []

    def progress(done, total):
        seen.append((done, total))
        raise KeyboardInterrupt

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        d._native.run_sweep(None, None, [("contexts", "64K,128K"), ("trials", "100000")], [], 2, progress, None, False, False)
    assert time.monotonic() - started < 20
    assert seen and seen[0][1] > 0


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs POSIX signals")
def test_ctrl_c_stops_a_sweep_with_keyboard_interrupt():
    """SIGINT (Ctrl-C, or a notebook's interrupt) while the sweep runs."""
    # Python's own handler, even where the shell started us with SIGINT
    # ignored (a background job of a non-interactive shell).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    main = threading.main_thread().ident
    timer = threading.Timer(1.0, lambda: signal.pthread_kill(main, signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            d.sweep(progress=False, contexts="64K,128K", trials=100000, threads=2)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 20


def test_progress_bar_counts_every_trial(capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tqdm(name, *args, **kwargs):
        if name.startswith("tqdm"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    d.sweep(progress=True, contexts="8K", topk=512, depths=[0, 50], trials=10, precisions="fp32")
    err = capsys.readouterr().err
    assert "sweep: 20/20 trials (100 %)" in err


def read_safetensors(path):
    """name → array, and the metadata, of a safetensors file (the format is
    an 8-byte header length, a JSON header, then the data)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    types = {"F32": "<f4", "I64": "<i8", "U8": "u1", "U16": "<u2", "U32": "<u4"}
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a : 8 + n + b], dtype=types[h["dtype"]]).reshape(h["shape"])
    return out, meta


def test_trial_equals_the_cli_dump(cli, tmp_path):
    path = tmp_path / "t.safetensors"
    cli("trial", "--context", "8K", "--depth", "25", "--topk", "512", "--precisions", "fp32,fp8,fp4", "--trial", "4", "--seed", "2", "--dump", path)
    ref, meta = read_safetensors(path)
    t = d.trial(context="8K", depth=25, topk=512, precisions="fp32,fp8,fp4", trial=4, seed=2)
    assert sorted(t) == sorted(ref)
    for name in ref:
        assert t[name].dtype == ref[name].dtype and np.array_equal(t[name], ref[name]), name
    assert t.meta == json.loads(meta["dsa_recall"])
    assert set(t.summary) == {"fp32", "fp8", "fp4"}
    with pytest.raises(d.ConfigError, match="context"):
        d.trial(context="4K,8K", depth=25, topk=512)
    # Knobs `trial` reads no value from are refused, as on the command line.
    for knob, value in (("trials", 5), ("threshold", 0.5), ("mode", "tail")):
        with pytest.raises(d.ConfigError, match=f"`trial` does not use --{knob}"):
            d.trial(context="8K", depth=25, topk=512, precisions="fp8", **{knob: value})


def test_replay_equals_the_cli(cli, tmp_path):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((3, 16, 128)).astype(np.float32)
    k = rng.standard_normal((700, 128)).astype(np.float32)
    w = rng.standard_normal((3, 16)).astype(np.float32)
    for name, a in (("q", q), ("k", k), ("w", w)):
        np.save(tmp_path / f"{name}.npy", a)
    r = cli("replay", "--q-npy", tmp_path / "q.npy", "--k-npy", tmp_path / "k.npy", "--weights-npy", tmp_path / "w.npy",
            "--needle-rows", "5,6", "--topk", "64,256", "--precisions", "bf16,fp8,fp4", "--json")
    df = d.replay(q, k, w, needle_rows=[5, 6], topk=[64, 256], variants=["bf16", "fp8", "fp4"])
    assert df.attrs["json_lines"] == r.stdout.splitlines()
    assert len(df) == 3 * 2 * 3
    assert df["needle_survived"].dtype == bool


def test_replay_agreement_equals_the_cli(cli, tmp_path):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 16, 128)).astype(np.float32)
    k = rng.standard_normal((500, 128)).astype(np.float32)
    w = rng.standard_normal((2, 16)).astype(np.float32)
    for name, a in (("q", q), ("k", k), ("w", w)):
        np.save(tmp_path / f"{name}.npy", a)
    r = cli("replay", "--q-npy", tmp_path / "q.npy", "--k-npy", tmp_path / "k.npy", "--weights-npy", tmp_path / "w.npy",
            "--topk", "64", "--precisions", "bf16,fp8", "--agreement", "bf16:fp8,fp32:fp8", "--json")
    df = d.replay(q, k, w, topk=64, variants=["bf16", "fp8"], agreement=["bf16:fp8", "fp32:fp8"])
    lines = r.stdout.splitlines()
    assert df.attrs["summaries"] == [json.loads(x) for x in lines[len(df):]]
    pairs = [s for s in df.attrs["summaries"] if s["summary"] == "agreement"]
    assert len(pairs) == 2 and all(0 <= s["agreement"] <= 1 for s in pairs)
    # Against fp32 the agreement is fp8's mean selection recall.
    assert abs(pairs[1]["agreement"] - df[df["precision"] == "fp8"]["selection_recall"].mean()) < 1e-9
    with pytest.raises(d.ConfigError, match="agreement"):
        d.replay(q, k, w, topk=64, variants=["bf16"], agreement="bf16:fp4")


def test_layered_replay_equals_the_cli(cli, tmp_path):
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 2, 8, 128)).astype(np.float32)
    k = rng.standard_normal((2, 300, 128)).astype(np.float32)
    w = rng.standard_normal((2, 8)).astype(np.float32)
    for name, a in (("q", q), ("k", k), ("w", w)):
        np.save(tmp_path / f"{name}.npy", a)
    r = cli("replay", "--q-npy", tmp_path / "q.npy", "--k-npy", tmp_path / "k.npy", "--weights-npy", tmp_path / "w.npy",
            "--needle-rows", "9", "--topk", "32", "--precisions", "fp8", "--json")
    df = d.replay(q, k, w, needle_rows=[9], topk=32, variants="fp8")
    lines = r.stdout.splitlines()
    assert df.attrs["json_lines"] == lines[: len(df)]
    assert df.attrs["summaries"] == [json.loads(x) for x in lines[len(df):]]
    assert list(df.columns)[0] == "layer"


def test_trial_refuses_faults_it_cannot_dump():
    # The dump scores its rows as given: a cache or selection fault would be
    # scored as its base, so it is refused (formats and scoring are not).
    with pytest.raises(d.ConfigError, match="invalid --precisions = fp8\\+slot-shift: variants of number formats"):
        d.trial(context=4096, depth=50, topk=512, precisions="fp8,fp8+slot-shift")
    t = d.trial(context=4096, depth=50, topk=512, precisions="fp8+no-relu")
    assert "fp8+no-relu.logits" in sorted(t)


def test_replay_refuses_bad_input():
    q, k, w = np.ones((4, 128), np.float32), np.ones((50, 128), np.float32), np.ones(4, np.float32)
    with pytest.raises(d.ConfigError, match="invalid --needle-rows = 50: row indices below 50"):
        d.replay(q, k, w, needle_rows=[50])
    with pytest.raises(d.ConfigError, match='invalid --precisions = "fp9"'):
        d.replay(q, k, w, variants=["fp9"])
    with pytest.raises(ValueError, match="keys have shape"):
        d.replay(q, np.ones((50, 64), np.float32), w)
    bad = q.copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="q holds NaN or infinite"):
        d.replay(bad, k, w)


def test_catalogues_match_the_cli(cli):
    names = [line.split()[0] for line in cli("presets").stdout.splitlines() if line.strip()]
    assert [p.name for p in d.presets()] == names
    assert "deepseek-v4-flash" in repr(d.presets()[0])
    assert d.presets()[0].scenario()["preset"] == "deepseek-v4-flash"
    hyp = cli("hypotheses").stdout.splitlines()[1:]  # after the header line
    assert [h.name for h in d.hypotheses()] == [line.split()[2] for line in hyp]
    h = d.hypotheses()[0]
    assert h.text == cli("hypotheses", "show", h.name).stdout
    assert repr(h).startswith(f"Hypothesis({h.name!r}")
    vs = d.variants()
    assert [v.name for v in vs][:3] == ["fp32", "bf16", "fp8"]
    assert repr(d.variant("fp8")) == (
        "Variant('fp8': q e4m3fn/128/ue8m0_ceil/hadamard, k e4m3fn/128/ue8m0_ceil/hadamard, weights f32, logits f32)"
    )
    custom = d.variant("name=kfp8;q=bf16;k=e4m3fn/128/ue8m0/hadamard")
    assert custom.name == "kfp8"
    assert d.variant("fp8+no-hadamard").name == "fp8+no-hadamard"
    assert ("needle_strength", "needle.strength") == d.knobs()[[k[0] for k in d.knobs()].index("needle_strength")][:2]


def test_plot_returns_the_cli_chart(cli_sweep):
    df = d.sweep(progress=False, **GRID)
    png = d.plot(df)
    assert png.startswith(b"\x89PNG")
    assert png == (cli_sweep / "recall_vs_context.png").read_bytes()
    assert d.plot(str(cli_sweep), "recall_vs_context") == png
    with pytest.raises(d.ConfigError, match='invalid kind = "nope": one of .*recall_vs_context'):
        d.plot(df, "nope")


def test_plot_matplotlib_draws_one_line_per_series():
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    df = d.sweep(progress=False, **GRID)
    ax = d.plot_matplotlib(df)
    assert len(ax.get_lines()) == 2
    assert d.plot_matplotlib(df, depth=60).get_lines()[0].get_xdata().tolist() == [1024, 4096]
    # Issue 30, item 12: the default is the CLI main chart's whole-model
    # recall, labelled so; per-layer recall is asked for and labelled so.
    assert ax.get_ylabel() == "whole-model recall"
    assert "mean over needle depths 0, 60 %" in ax.get_title()
    per_layer = d.plot_matplotlib(df, model=False, depth=60)
    assert per_layer.get_ylabel() == "per-layer selection recall"
    assert "depth 60 %" in per_layer.get_title()


def test_plot_matplotlib_reads_whole_model_recall_by_default():
    # Without matplotlib: the column and label the chart would draw.
    df = d.sweep(progress=False, **GRID)
    assert d._recall_series(df, None) == ("model_recall", "whole-model recall")
    assert d._recall_series(df, False) == ("recall", "per-layer selection recall")
    no_model = {k: v for k, v in df.items() if k != "model_recall"}
    assert d._recall_series(no_model, None) == ("recall", "per-layer selection recall")
    with pytest.raises(ValueError, match="model=True.*no whole-model recall"):
        d._recall_series(no_model, True)


def test_help_answers_the_usual_questions():
    doc = d.sweep.__doc__
    for word in ("preset", "contexts", "trials", "seed", "progress", "KeyboardInterrupt", "summary.csv"):
        assert word in doc, word
    for f in (d.quantize, d.score, d.select, d.replay, d.trial, d.plot):
        assert f.__doc__ and len(f.__doc__) > 100, f.__name__


def test_the_2026_presets_sweep_on_their_layer_plans():
    # Each preset's whole-model recall counts its own plan's selecting
    # layers; a plan in words is a knob like any other.
    for preset, layers in [("deepseek-v4.1-flash", 38), ("glm-5.2", 78), ("glm-5.3-flash", 11)]:
        df = d.sweep(preset, progress=False, contexts="4K", precisions=["bf16"], trials=5)
        assert list(df["indexed_layers"]) == [layers] * len(df), preset
    df = d.sweep("glm-5.2", progress=False, contexts="4K", precisions=["bf16"], trials=5, layers="i1, s, s, i1")
    assert set(df["indexed_layers"]) == {4}
    with pytest.raises(d.ConfigError, match="layer 1 reuses layer 3, a later layer"):
        d.sweep("glm-5.2", progress=False, contexts="4K", trials=5, layers="i1, s3, i1, i1")
