#!/usr/bin/env python3
"""Runs a notebook's code cells top to bottom and fails on the first error,
so that CI executes python/examples/*.ipynb without Jupyter installed.

    python tools/run_notebook.py python/examples/quickstart.ipynb

With nbclient and ipykernel installed, nbclient executes the notebook in a
real kernel (what a reader's Jupyter does); otherwise the cells run here, in
one namespace, as a script would (IPython's `display` shows nothing, and a
cell's last expression is not printed). Prints one line per cell with its
time, and exits 1 naming the cell that failed.
"""

import json
import sys
import time
import traceback


def code_cells(path):
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    if nb.get("nbformat") != 4:
        raise SystemExit(f"run_notebook: {path}: nbformat {nb.get('nbformat')!r}; this runner reads version 4")
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in nb["cells"] if c["cell_type"] == "code"]


def with_nbclient(path):
    """True when nbclient ran the notebook (False: it is not installed)."""
    try:
        import nbclient
        import nbformat
        import ipykernel  # noqa: F401  (the kernel nbclient starts)
    except ImportError:
        return False
    nb = nbformat.read(path, as_version=4)
    t = time.monotonic()
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    print(f"run_notebook: {path}: {len(nb.cells)} cells in a kernel (nbclient), {time.monotonic() - t:.1f} s")
    return True


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    path = argv[0]
    # Charts without a display.
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        pass
    if with_nbclient(path):
        return 0
    scope = {"__name__": "__main__"}
    start = time.monotonic()
    for i, source in enumerate(code_cells(path), 1):
        t = time.monotonic()
        try:
            exec(compile(source, f"{path} cell {i}", "exec"), scope)
        except Exception:
            traceback.print_exc()
            print(f"run_notebook: {path}: code cell {i} failed", file=sys.stderr)
            return 1
        print(f"run_notebook: cell {i}: {time.monotonic() - t:.1f} s")
    print(f"run_notebook: {path}: every code cell ran, {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
