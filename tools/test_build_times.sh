#!/usr/bin/env bash
# Cold and incremental `cargo test --no-run` times of two commits, in one run:
#   tools/test_build_times.sh BEFORE AFTER [WORKDIR]
# Each commit is checked out into its own worktree with its own, empty target
# directory. Order: BEFORE cold, AFTER cold; then a comment appended to
# src/score/trial/chunk.rs, BEFORE and AFTER rebuilt; then one line of code
# in the trial's chunk loop (`std::hint::black_box(());` at the top of
# `score_all`: new machine code, same results), BEFORE and AFTER rebuilt.
# Prints seconds of wall time; the dependencies' sources must already be
# downloaded (no network needed).
set -euo pipefail
before=$1
after=$2
work=${3:-$(mktemp -d)}
repo=$(git rev-parse --show-toplevel)
for side in before after; do
    commit=${!side}
    git -C "$repo" worktree add -q --detach "$work/$side" "$commit"
done
cleanup() {
    for side in before after; do git -C "$repo" worktree remove --force "$work/$side" 2>/dev/null || true; done
}
trap cleanup EXIT
build() {
    local side=$1
    local start end
    start=$(date +%s.%N)
    (cd "$work/$side" && CARGO_TARGET_DIR="$work/$side-target" cargo test --no-run -q >/dev/null 2>&1)
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}
echo "before $before, after $after, $(nproc) cores"
echo "cold before: $(build before) s"
echo "cold after: $(build after) s"
for side in before after; do echo "// a one-line change" >> "$work/$side/src/score/trial/chunk.rs"; done
echo "comment before: $(build before) s"
echo "comment after: $(build after) s"
for side in before after; do
    python3 - "$work/$side/src/score/trial/chunk.rs" <<'PY'
import sys
path = sys.argv[1]
lines = open(path).read().split("\n")
at = next(i for i, l in enumerate(lines) if "fn score_all(" in l)
body = next(i for i in range(at, len(lines)) if lines[i].endswith("{"))
lines.insert(body + 1, "        std::hint::black_box(());")
open(path, "w").write("\n".join(lines))
PY
    grep -q 'black_box(());' "$work/$side/src/score/trial/chunk.rs" || { echo "no score_all in $side" >&2; exit 1; }
done
echo "code line before: $(build before) s"
echo "code line after: $(build after) s"
rm -rf "$work/before-target" "$work/after-target"
