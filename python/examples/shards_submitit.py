"""A sweep split into shards, each run as a job through submitit, then merged.

Each job runs ``dr.sweep(..., shard=(i, n), out=DIR)`` (the command line's
``sweep --shard I/N --out DIR``); ``dr.merge`` joins the shard directories
into one, written as an unsharded sweep writes it. The script checks that
claim: it runs the same grid unsharded and compares the files byte for byte.

    python python/examples/shards_submitit.py              # 3 shards, local processes
    python python/examples/shards_submitit.py --shards 4 --keep out/

Here the jobs are local processes (submitit's LocalExecutor); on a Slurm
cluster, ``submitit.AutoExecutor(folder=...)`` with ``slurm_partition=…``
(and ``executor.map_array`` for a job array) runs the same function on
nodes, with the shard directories on a shared file system
(docs/CLUSTER.md). Without submitit installed, the script says so and
exits 0 (pip install submitit).
"""

import argparse
import sys
import tempfile
from pathlib import Path

import dsa_recall as dr

# A small grid: seconds per shard.
GRID = dict(contexts="4K,16K", depths=[0, 50, 100], topk=512, precisions=["fp32", "fp8"], trials=20, seed=5)
FILES = ("results.jsonl", "summary.csv", "effective_context.csv")


def run_shard(index: int, count: int, out: str) -> str:
    """One job: shard index/count of GRID into out; returns the directory."""
    import dsa_recall as dr  # in the job's own process

    return dr.sweep(progress=False, threads=1, out=out, shard=(index, count), **GRID).out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=3, help="number of shards (jobs)")
    ap.add_argument("--keep", help="keep the shard, merged and whole directories here (default: a temporary folder, removed)")
    args = ap.parse_args(argv)
    try:
        import submitit
    except ImportError:
        print("submitit is not installed: skipping the sharded sweep (pip install submitit to run it)")
        return 0
    with tempfile.TemporaryDirectory(prefix="dsa-recall-shards-") as tmp:
        root = Path(args.keep or tmp)
        executor = submitit.LocalExecutor(folder=str(Path(tmp) / "submitit"))
        executor.update_parameters(timeout_min=10)
        n = args.shards
        jobs = [executor.submit(run_shard, i, n, str(root / f"shard-{i}-of-{n}")) for i in range(1, n + 1)]
        shard_dirs = [job.result() for job in jobs]
        print(f"{n} shards done: {', '.join(Path(d).name for d in shard_dirs)}")
        merged = dr.merge(shard_dirs, root / "merged", force=True)
        whole = dr.sweep(progress=False, out=root / "whole", force=True, **GRID)
        print(f"merged: {merged!r}")
        different = [f for f in FILES if (root / "merged" / f).read_bytes() != (root / "whole" / f).read_bytes()]
        if different or merged.attrs["results_jsonl"] != whole.attrs["results_jsonl"]:
            print(f"UNEXPECTED: the merged sweep differs from the unsharded one in {', '.join(different) or 'its cells'}")
            return 1
        print(f"merged == unsharded, byte for byte ({', '.join(FILES)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
