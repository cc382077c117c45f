#!/usr/bin/env bash
# Produces the fxprof profile outputs quoted in docs/memory.md (the eager and compiled resnet18 runs; the
# compiled toy model and the session are docs/scripts/memory_compiled.py and memory_session.py):
#   bash docs/scripts/memory_page.sh
set -uo pipefail
echo "### M1"
fxprof profile resnet18 --iters 5
echo "### M2"
fxprof profile resnet18 --iters 2 --warmup 1 --peaks off --sort mem_peak_bytes --top 6 \
    --columns kind,median_ms,mem_delta_bytes,mem_temp_bytes,mem_peak_bytes,mem_live_bytes
echo "### M3"
fxprof profile resnet18 --iters 2 --warmup 1 --peaks off --group-by scope
echo "### M4"
fxprof profile resnet18 --backward --input 2x3x64x64 --iters 3 --top 12
echo "### M6"
fxprof profile resnet18 --compile --input 1x3x64x64 --iters 5 --warmup 2 --sort mem_peak_bytes --top 8 \
    --columns kind,scope,median_ms,mem_delta_bytes,mem_temp_bytes,mem_peak_bytes,mem_live_bytes
