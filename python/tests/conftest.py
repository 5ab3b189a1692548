"""Shared fixtures: the CLI binary the results are compared against."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _find_cli():
    """DSA_RECALL_BIN, else the release binary of CARGO_TARGET_DIR or target/."""
    if os.environ.get("DSA_RECALL_BIN"):
        return Path(os.environ["DSA_RECALL_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    for p in (target / "release" / "dsa-recall", REPO / "target" / "release" / "dsa-recall"):
        if p.is_file():
            return p
    found = shutil.which("dsa-recall")
    return Path(found) if found else None


@pytest.fixture(scope="session")
def cli():
    """Runs the dsa-recall binary: cli(*args, stdin=None) → CompletedProcess."""
    path = _find_cli()
    if path is None or not path.is_file():
        pytest.skip("no dsa-recall binary: build it (cargo build --release) or set DSA_RECALL_BIN")

    def run(*args, stdin=None, check=True):
        r = subprocess.run([str(path), *map(str, args)], input=stdin, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise AssertionError(f"dsa-recall {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr}")
        return r

    return run


def cli_error(cli, *args):
    """The CLI's one-line error for `args`, without `error: `; checks exit code 2."""
    r = cli(*args, check=False)
    assert r.returncode == 2, (args, r.returncode, r.stderr)
    line = r.stderr.strip()
    assert "\n" not in line and line.startswith("error: "), line
    return line[len("error: ") :]
