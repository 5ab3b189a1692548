"""The README's Python example and python/examples/forward_hook.py run
(issue 19, item 5 and "Done when")."""

import re
import subprocess
import sys

import pytest

from conftest import REPO


def readme_python_example():
    text = (REPO / "README.md").read_text()
    section = text[text.index("\n## Python\n") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_runs():
    pytest.importorskip("pandas")
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    code = readme_python_example()
    assert "dr.sweep(" in code and "dr.replay(" in code
    # Fewer trials and contexts than shown, the same calls.
    code = code.replace("trials=200", "trials=10").replace('"1K..32K"', '"4K,8K"')
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["top"].shape == (512,)
    assert scope["codes"].shape == (8192, 128)


def test_the_forward_hook_example_runs():
    r = subprocess.run([sys.executable, str(REPO / "python" / "examples" / "forward_hook.py")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    try:
        import torch  # noqa: F401
    except ImportError:
        assert "torch is not installed: skipping" in r.stdout
        return
    line = next(x for x in r.stdout.splitlines() if x.startswith("largest |dsa_recall.score"))
    assert float(line.split(":")[1]) < 1e-2 * 64
    assert "selection_recall" in r.stdout


def test_the_check_standin_example_runs():
    args = ["--layers", "2", "--context", "1024", "--topk", "128", "--heads", "16", "--hidden", "256", "--device", "cpu"]
    r = subprocess.run([sys.executable, str(REPO / "python" / "examples" / "check_standin.py"), *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        import torch  # noqa: F401
    except ImportError:
        assert "torch is not installed: skipping" in r.stdout
        return
    assert "as expected" in r.stdout
