#!/usr/bin/env bash
# Python tests of the `dsa_recall` package (python/, issue 19): a virtual
# environment (target/py-venv, or $DSA_RECALL_VENV), the package and its test
# extras installed by one `pip install './python[test]'` (numpy, pandas,
# ml_dtypes, pytest, matplotlib, tqdm, submitit from PyPI; maturin as the
# build backend), the release CLI built for the tests that compare against
# it, then pytest, then the quickstart notebook (tools/run_notebook.py),
# then README.md's Python example in a fresh venv (tools/readme_python.sh).
# Ends with pytest's closing line and one plain summary line; exits
# non-zero on a failure and when pytest collected no test (exit 5).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
venv=${DSA_RECALL_VENV:-$target/py-venv}
python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
    echo "python_tests: $python is not installed; the Python tests need Python >= 3.9 with venv" >&2
    exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
cargo build --release --bin dsa-recall
# The wheel's Rust build shares the target directory with the CLI's.
CARGO_TARGET_DIR=$target "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "./python[test]"
export DSA_RECALL_BIN=$target/release/dsa-recall
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Run from the repository root with the venv's pytest, so that `import
# dsa_recall` finds the installed package, not the source folder.
set +e
"$venv/bin/pytest" -q -p no:cacheprovider python/tests "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if [ "$status" -eq 5 ]; then
    echo "python_tests: pytest collected no test" >&2
    exit 1
fi
# The quickstart notebook, top to bottom (nbclient when installed, else
# tools/run_notebook.py runs its code cells): a reader's first run.
if ! "$venv/bin/python" tools/run_notebook.py python/examples/quickstart.ipynb; then
    echo "python_tests: python/examples/quickstart.ipynb failed" >&2
    status=1
fi
# The README's example as written, in a fresh venv (its own pip install).
if ! bash tools/readme_python.sh; then
    echo "python_tests: the README's Python example failed" >&2
    status=1
fi
awk '/ in [0-9.]+s/ { for (i = 1; i < NF; i++) { w = $(i + 1); if (w ~ /^passed/) p = $i; if (w ~ /^(failed|errors?)/) f += $i; if (w ~ /^skipped/) s = $i } }
     END { printf "python: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit "$status"
