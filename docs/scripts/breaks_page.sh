#!/bin/sh
# Produces the real output quoted in docs/compiled.md's worked example on graph breaks:
#   PYTHONPATH=. sh docs/scripts/breaks_page.sh OUTDIR
set -e
out=${1:-/tmp/fxprof-breaks}
mkdir -p "$out"
m=docs/scripts/breaks_model.py
python -m fxprof profile $m:checked --compile --input 8x64 --threads 1 --iters 40 --top 8 --json "$out/checked.json" > "$out/checked.txt" 2>&1
python -m fxprof profile $m:fixed --compile --input 8x64 --threads 1 --iters 40 --top 8 --json "$out/fixed.json" > "$out/fixed.txt" 2>&1
python -m fxprof profile $m:checked --input 8x64 --threads 1 --iters 40 --json "$out/eager.json" > "$out/eager.txt" 2>&1
python -m fxprof compare "$out/eager.json" "$out/checked.json" --by scope --depth 1 --columns a_ms,b_ms,speedup,b_nodes,breaks > "$out/compare.txt" 2>&1
python -m fxprof compare "$out/checked.json" "$out/fixed.json" --by scope --depth 1 --columns a_ms,b_ms,speedup,a_nodes,b_nodes,breaks > "$out/fixed_compare.txt" 2>&1
python docs/scripts/breaks_timing.py > "$out/timing.txt" 2>&1
