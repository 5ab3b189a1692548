"""The binding's overhead on a 32K-token sweep (docs/PERFORMANCE.md,
"Python binding"): the same sweep through the CLI binary and through
dsa_recall.sweep, alternating, N runs each; medians and their ratio.

    python python/bench/sweep_overhead.py [--bin target/release/dsa-recall] [--runs 5] [--trials 500]

Both sides write the same output directory (dsa_recall.sweep(out=...)), so
they do the same work; the in-memory form (no files, no charts) is timed too.
Wall time and CPU time (user + system: the child's for the CLI, this
process's for the binding) are both reported; CPU time moves less with
other load on the machine.
"""


def cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def timed(f, who):
    w, c = time.perf_counter(), cpu(who)
    f()
    return time.perf_counter() - w, cpu(who) - c

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import dsa_recall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("DSA_RECALL_BIN", "target/release/dsa-recall"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    knobs = dict(contexts="32K", depths=[10, 50, 90], trials=args.trials, seed=1, precisions=["fp32", "bf16", "fp8", "fp4"])
    flags = ["--contexts", "32K", "--depths", "10,50,90", "--trials", str(args.trials), "--seed", "1", "--precisions", "fp32,bf16,fp8,fp4"]
    cli, py_out, py_mem = [], [], []
    child, me = resource.RUSAGE_CHILDREN, resource.RUSAGE_SELF
    with tempfile.TemporaryDirectory() as tmp:
        command = [args.bin, "sweep", "--out", f"{tmp}/cli", "--force", "--threads", str(args.threads), *flags]
        for i in range(args.runs):
            cli.append(timed(lambda: subprocess.run(command, check=True, capture_output=True), child))
            py_out.append(timed(lambda: dsa_recall.sweep(progress=False, threads=args.threads, out=f"{tmp}/py", force=True, **knobs), me))
            py_mem.append(timed(lambda: dsa_recall.sweep(progress=False, threads=args.threads, **knobs), me))
            print(
                f"run {i + 1}: cli {cli[-1][0]:.2f} s ({cli[-1][1]:.2f} CPU), python (out=) {py_out[-1][0]:.2f} s ({py_out[-1][1]:.2f} CPU), "
                f"python (in memory) {py_mem[-1][0]:.2f} s ({py_mem[-1][1]:.2f} CPU)",
                file=sys.stderr,
            )
        same = open(f"{tmp}/cli/results.jsonl").read() == open(f"{tmp}/py/results.jsonl").read()
    med = [(statistics.median(x[0] for x in runs), statistics.median(x[1] for x in runs)) for runs in (cli, py_out, py_mem)]
    print(f"32K sweep, {args.trials} trials × 3 depths × 4 precisions, {args.threads} threads, {args.runs} runs each (medians)")
    print(f"{'':24} {'wall':>8} {'ratio':>6} {'CPU':>8} {'ratio':>6}")
    for name, (w, c) in zip(("cli", "dsa_recall.sweep(out=)", "dsa_recall.sweep()"), med):
        print(f"{name:24} {w:7.2f}s {w / med[0][0]:6.3f} {c:7.2f}s {c / med[0][1]:6.3f}")
    print(f"results.jsonl identical: {same}")


if __name__ == "__main__":
    main()
