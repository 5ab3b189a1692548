#!/usr/bin/env bash
# Saves the outputs a "same bits" change must keep, from one dsa-recall
# binary, so that two binaries can be compared with diff -r:
#
#   tools/same_bits.sh BEFORE_BINARY /tmp/ref/before
#   tools/same_bits.sh target/release/dsa-recall /tmp/ref/after
#   diff -r /tmp/ref/before /tmp/ref/after   # only trial.txt's first line (the path) may differ
#
# Ten sweeps (default; null model in four formats; pooling full; gate noise
# with distractors and correlated tokens; V3.2; hypothesis variants; every
# needle offset; tail mode to 1M, under the strength needle it needs; the
# prediction with and without physics),
# each with results.jsonl, summary.csv, manifest.json, charts and
# report.html; run, trial --dump, replay (JSON, table, chart), quantize,
# presets and hypotheses. About 20 s on 2 cores. Set DSA_RECALL_SIMD to
# compare SIMD paths.
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 BINARY OUTPUT_DIR" >&2
    exit 2
fi
B=$1
O=$2
rm -rf "$O"
mkdir -p "$O"
# SAME_BITS_FLAGS: flags added to every scenario command (e.g. --needle-profile stress,
# to compare a binary whose defaults moved with one from before).
T="--threads 2 ${SAME_BITS_FLAGS:-}"
q() { "$@" > /dev/null 2>&1; }
q "$B" sweep --out "$O/default" --force $T
q "$B" sweep --out "$O/null" --force $T --rope off --pooling off --precisions fp32,bf16,fp8,fp4 --contexts 1K..64K --depths 0,50,100 --trials 100
q "$B" sweep --out "$O/poolfull" --force $T --pooling full --contexts 4K,16K --trials 60
q "$B" sweep --out "$O/gatenoise" --force $T --gate-noise-std 0.5 --distractors 3 --correlation-length 8 --contexts 4K,16K --trials 50 --precisions fp32,fp8,fp4
q "$B" sweep --out "$O/v32" --force $T --preset deepseek-v3.2 --contexts 4K..32K --trials 80 --precisions fp32,bf16,fp8
q "$B" sweep --out "$O/hyp" --force $T --contexts 4K,16K --trials 60 \
    --precisions "bf16,fp8+slot-shift,bf16+rope-swap-k,fp4+ties-highest,fp8+scale-per-page,bf16+topk=256"
q "$B" sweep --out "$O/offsets" --force $T --needle-offsets all --distractors 3 --contexts 4K,16K --trials 60
q "$B" sweep --out "$O/tail" --force $T --needle-profile stress --mode tail --contexts 32K,128K,1M --trials 64 --precisions bf16,fp4
q "$B" sweep --out "$O/predict" --force $T --predict on --contexts 4K,32K --trials 60
q "$B" sweep --out "$O/predictnull" --force $T --predict on --rope off --pooling off --contexts 4K,32K --trials 60
"$B" run --context 32K --depth 30 --topk 512 --precision fp8 --trials 40 --print-trials $T > "$O/run.txt" 2>&1
"$B" run --context 32K --depth 30 --topk 512 --precision fp8 --trials 40 --json $T > "$O/run.json" 2>&1
"$B" trial --context 16K --depth 40 --topk 512 --precisions fp32,fp8,fp4 --dump "$O/trial.safetensors" $T > "$O/trial.txt" 2>&1
"$B" replay "$O/trial.safetensors" --topk 256,512 --json > "$O/replay.txt" 2>&1
"$B" replay "$O/trial.safetensors" --topk 256,512 --chart "$O/replay.png" > "$O/replay_table.txt" 2>&1
"$B" presets > "$O/presets.txt"
"$B" presets show deepseek-v4-flash > "$O/preset_show.txt"
"$B" hypotheses > "$O/hyps.txt"
seq 0 0.37 20 | "$B" quantize --format e2m1 --block 16 --scale ue8m0 --codes > "$O/quant.txt"
echo "saved to $O"
