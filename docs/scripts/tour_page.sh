#!/usr/bin/env bash
# Regenerates the example output of docs/tour.md (sections 2 and 4): resnet18 profiled with one
# thread and with two, then compared. Run from the project root on a quiet machine (the page
# shows what a new user sees there); paste the blocks.
#
#   bash docs/scripts/tour_page.sh OUT_FOLDER > /tmp/tour_page.txt
set -uo pipefail
root="$(pwd)"
out="${1:-$(mktemp -d)}"
mkdir -p "$out" && cd "$out"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
fxprof() { python -m fxprof "$@"; }
echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(uptime | sed 's/.*load/load/')"
echo '$ COLUMNS=100 fxprof profile resnet18 --input 1x3x64x64 --threads 1 --json one.json --html one.html --top 8'
COLUMNS=100 fxprof profile resnet18 --input 1x3x64x64 --threads 1 --json one.json --html one.html --top 8 --quiet 2>&1
echo '$ COLUMNS=100 fxprof profile resnet18 --input 1x3x64x64 --threads 2 --json two.json --top 3'
COLUMNS=100 fxprof profile resnet18 --input 1x3x64x64 --threads 2 --json two.json --top 3 --quiet 2>&1
echo '$ COLUMNS=100 fxprof compare one.json two.json --top 8'
COLUMNS=100 fxprof compare one.json two.json --top 8 2>&1
echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(uptime | sed 's/.*load/load/')"
