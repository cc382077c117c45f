#!/bin/sh
# Produces the real output quoted in docs/compiled.md:  sh docs/scripts/compiled_page.sh OUTDIR
set -e
out=${1:-/tmp/fxprof-compiled}
mkdir -p "$out"
python -m fxprof profile resnet18 --compile --input 1x3x64x64 --threads 1 --top 15 --json "$out/compiled.json" > "$out/profile.txt" 2>&1
python -m fxprof profile resnet18 --input 1x3x64x64 --threads 1 --json "$out/eager.json" > "$out/eager.txt" 2>&1
python -m fxprof show "$out/compiled.json" --group-by scope --depth 1 > "$out/groups.txt" 2>&1
python -m fxprof compare "$out/eager.json" "$out/compiled.json" --by scope --depth 1 --columns a_ms,b_ms,speedup,a_nodes,b_nodes > "$out/compare.txt" 2>&1
python -m fxprof show "$out/compiled.json" --top 6 --columns kind,scope,scope_source,origins,raw_name,median_ms > "$out/origins.txt" 2>&1
