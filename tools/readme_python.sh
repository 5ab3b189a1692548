#!/usr/bin/env bash
# Runs README.md's Python section exactly as written (issue 30, item 11):
# between the `readme-python: begin/end` markers, every `pip install` line
# of its sh block in a fresh virtual environment, then its python block
# with that environment's interpreter (matplotlib without a display).
# The Rust build shares CARGO_TARGET_DIR (or target/) with the CLI's and
# tools/python_tests.sh's, so the wheel's crates are not compiled again.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
section=$(sed -n '/<!-- readme-python: begin/,/<!-- readme-python: end/p' README.md)
if [ -z "$section" ]; then
    echo "readme_python: no readme-python markers in README.md" >&2
    exit 1
fi
installs=$(printf '%s\n' "$section" | awk '/^```sh/ { on = 1; next } /^```/ { on = 0 } on && /^pip install/ { sub(/[ \t]+#.*/, ""); print }')
code=$(printf '%s\n' "$section" | awk '/^```python/ { on = 1; next } /^```/ { on = 0 } on')
if [ -z "$installs" ] || [ -z "$code" ]; then
    echo "readme_python: README.md's Python section lacks a pip install line or a python block" >&2
    exit 1
fi
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
"$python" -m venv "$venv"
while IFS= read -r line; do
    echo "readme_python: $line"
    (source "$venv/bin/activate" && eval "$line --quiet --disable-pip-version-check")
done <<< "$installs"
# From a folder outside the repository, so that `import dsa_recall` finds
# the installed package, not python/dsa_recall.
(cd "$venv" && MPLBACKEND=Agg "$venv/bin/python" -c "$code")
echo "readme_python: the README's Python example ran"
