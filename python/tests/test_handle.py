"""The sweep's result as a handle on the native one (converted on demand,
charts drawn from it in memory), native catalogue classes, shards and merge
from Python, and the newcomer's Python failures: each error one line naming
the argument or column and what is allowed."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest

import dsa_recall as d
from conftest import REPO

GRID = dict(contexts="1K,4K", depths=[0, 60], topk=512, precisions=["fp32", "fp8"], trials=40, seed=3)
GRID_FLAGS = ["--contexts", "1K,4K", "--depths", "0,60", "--topk", "512", "--precisions", "fp32,fp8", "--trials", "40", "--seed", "3"]
FILES = ("results.jsonl", "summary.csv", "effective_context.csv")


@pytest.fixture(scope="module")
def result():
    return d.sweep(progress=False, **GRID)


@pytest.fixture(scope="module")
def cli_sweep(cli, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    cli("sweep", "--out", out, "--force", "--threads", "1", *GRID_FLAGS)
    return out


def test_sweep_returns_the_native_result_converted_on_demand(result, cli_sweep):
    assert isinstance(result, d.SweepResult) and isinstance(result._native, d._native.SweepResult)
    assert len(result) == 8
    assert repr(result).startswith("SweepResult(8 cells: 2 contexts × 2 depths × 1 k × 2 precisions, 40 trials each")
    assert result.columns[:2] == ["context_tokens", "depth_percent"]
    assert result["context_tokens"].tolist() == [1024, 1024, 4096, 4096] * 2
    assert "recall" in result and "nope" not in result
    with pytest.raises(KeyError, match="'nope': not a column; the columns are context_tokens"):
        result["nope"]
    records = result.to_numpy()
    assert records.shape == (8,) and records.dtype.names == tuple(result.columns)
    assert np.array_equal(records["recall"], result["recall"])
    with pytest.raises(ValueError, match="read-only"):
        result["recall"][0] = 0.5
    cols = result.to_dict()
    assert isinstance(cols, d.Columns) and list(cols) == result.columns
    cols["recall"][0] = 0.5  # a copy, the caller's to change
    assert cols.attrs["summary_csv"] == (cli_sweep / "summary.csv").read_text()
    assert result.attrs["results_jsonl"] == (cli_sweep / "results.jsonl").read_text()
    assert result.out is None


def test_to_pandas_is_the_cli_table(result, cli_sweep):
    pd = pytest.importorskip("pandas")
    df = result.to_pandas()
    pd.testing.assert_frame_equal(df, pd.read_csv(cli_sweep / "summary.csv"), check_exact=True)
    assert df.attrs["effective_context"] == (cli_sweep / "effective_context.csv").read_text()


def test_charts_come_from_the_native_result_without_files(result, cli_sweep):
    # No text round trip through a temporary folder any more.
    assert not hasattr(d._native, "render_charts")
    kinds = result.chart_kinds()
    assert kinds[0] == "recall_vs_context" and "heatmap" in kinds
    for kind in kinds:
        assert result.chart(kind) == (cli_sweep / f"{kind}.png").read_bytes(), kind
    assert d.plot(result, "heatmap") == (cli_sweep / "heatmap.png").read_bytes()
    assert d.plot(cli_sweep, "compare") == (cli_sweep / "compare.png").read_bytes()
    with pytest.raises(d.ConfigError, match='invalid kind = "nope": one of recall_vs_context, '):
        result.chart("nope")


def test_a_dataframe_from_to_pandas_still_plots(result, cli_sweep):
    pytest.importorskip("pandas")
    assert d.plot(result.to_pandas()) == (cli_sweep / "recall_vs_context.png").read_bytes()


def test_catalogue_entries_are_the_native_classes():
    p = d.presets()[0]
    assert type(p) is d._native.Preset is d.Preset
    assert list(p._asdict()) == ["name", "description", "toml"]
    h = d.hypotheses()[0]
    assert type(h) is d.Hypothesis and h._asdict()["name"] == h.name
    v = d.variant("fp8")
    assert type(v) is d.Variant and v._asdict()["definition"] == v.definition


def test_shards_merge_into_the_unsharded_sweep(cli, cli_sweep, tmp_path, result):
    parts = [d.sweep(progress=False, out=tmp_path / f"s{i}", shard=(i, 3), **GRID) for i in (1, 2, 3)]
    assert sum(len(p) for p in parts) == len(result)
    assert all(p.out == str(tmp_path / f"s{i}") for i, p in zip((1, 2, 3), parts))
    # The command line's shard writes the same results.
    cli("sweep", "--out", tmp_path / "c2", "--shard", "2/3", "--threads", "1", *GRID_FLAGS)
    assert (tmp_path / "c2" / "results.jsonl").read_bytes() == (tmp_path / "s2" / "results.jsonl").read_bytes()
    merged = d.merge([tmp_path / f"s{i}" for i in (1, 2, 3)], tmp_path / "m")
    assert merged.attrs["results_jsonl"] == result.attrs["results_jsonl"]
    for name in FILES:
        assert (tmp_path / "m" / name).read_bytes() == (cli_sweep / name).read_bytes(), name
    assert len(d.read_sweep(tmp_path / "m")) == len(result)
    with pytest.raises(d.ConfigError, match=r"invalid shard = \(1, 3\): a shard is written to a directory; give out="):
        d.sweep(progress=False, shard=(1, 3), **GRID)
    with pytest.raises(d.ConfigError, match=r'invalid --shard = "4/3": I/N with 1 ≤ I ≤ N'):
        d.sweep(progress=False, out=tmp_path / "bad", shard=(4, 3), **GRID)


# ------------------------------------------------- the newcomer's failures


def test_saving_a_capture_to_a_device_names_the_path():
    cap = d.IndexerCapture("sglang-v32-fp8", pipeline="fp8", topk=4)
    cap.add(layer=0, kv_cache=np.zeros((1, 64 * 132), np.uint8), block_table=[0], seq_len=8, weights=np.ones(2, np.float32),
            q=np.ones((2, 128), np.float32), topk_indices=[0, 1, 2, 3])
    with pytest.raises(d.InputError, match=r"invalid path = '/dev/full': exists and is not a folder; give a file name ending in \.safetensors"):
        cap.save("/dev/full")
    with pytest.raises(d.InputError, match=r"invalid path = '/dev/null/x\.safetensors'|cannot write the capture to '/dev/null/x\.safetensors'"):
        cap.save("/dev/null/x.safetensors")


def test_plot_matplotlib_names_the_missing_columns():
    pd = pytest.importorskip("pandas")
    with pytest.raises(d.InputError, match="plot_matplotlib: the table lacks column.s. context_tokens, topk, precision, depth_percent, recall"):
        d.plot_matplotlib(pd.DataFrame({"x": [1.0]}))


def test_resume_without_out_is_refused():
    with pytest.raises(d.ConfigError, match="invalid resume = True: resuming needs out="):
        d.sweep(progress=False, resume=True, contexts="4K", trials=2)


def test_errors_of_an_in_memory_capture_do_not_name_a_temporary_file():
    cap = d.IndexerCapture("sglang-v32-fp8", pipeline="fp8", topk=4)
    # A block table that points past the cache: the checker refuses it.
    cap.add(layer=0, kv_cache=np.zeros((1, 64 * 132), np.uint8), block_table=[5], seq_len=8, weights=np.ones(2, np.float32),
            q=np.ones((2, 128), np.float32), topk_indices=[0, 1, 2, 3])
    with pytest.raises(ValueError) as e:
        d.check(cap)
    message = str(e.value)
    assert "dsa-recall-check-" not in message and "capture.safetensors" not in message, message
    assert "the in-memory capture" in message, message


def test_progress_in_a_log_is_whole_lines(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # as without tqdm
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    clock = iter([0.0, 0.2, 11.0, 11.5, 30.0, 30.1])
    monkeypatch.setattr(d.time, "monotonic", lambda: next(clock))
    bar = d._Progress(True)
    for done in (1, 5, 6, 10, 10):
        bar(done, 10)
    bar.close()
    assert "\r" not in err.getvalue()
    assert err.getvalue().splitlines() == ["sweep: 5/10 trials (50 %)", "sweep: 10/10 trials (100 %)"]


def test_check_standin_leaves_nothing_in_the_temporary_folder(tmp_path):
    pytest.importorskip("torch", reason="check_standin.py needs torch (pip install torch); without it the script exits before writing")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    args = ["--layers", "1", "--context", "512", "--topk", "64", "--heads", "8", "--hidden", "128", "--device", "cpu"]
    r = subprocess.run([sys.executable, str(REPO / "python" / "examples" / "check_standin.py"), *args], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_submitit_example_merges_shards_byte_for_byte():
    pytest.importorskip("submitit", reason="submitit is not installed (pip install submitit): the sharded example is not run")
    r = subprocess.run([sys.executable, str(REPO / "python" / "examples" / "shards_submitit.py"), "--shards", "2"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "merged == unsharded, byte for byte" in r.stdout
