#!/usr/bin/env bash
# Regenerates the example output of docs/cli.md: runs each command in a scratch folder and prints
# it as it appears on the page ("$ command", its output, "(exit N)" when it fails). Run from the
# project root with fxprof installed (or PYTHONPATH set); paste the blocks into docs/cli.md.
#
#   bash docs/scripts/cli_examples.sh > /tmp/cli_examples.txt
set -uo pipefail
root="$(pwd)"
work="$(mktemp -d)"
cd "$work"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"

run() {  # print the command as typed, then what it printed (stdout and stderr, in order)
    echo "\$ $*"
    eval "$@" 2>&1
    local code=$?
    [ "$code" -ne 0 ] && echo "(exit $code)"
    return 0
}

echo "### profile"
run COLUMNS=100 fxprof profile resnet18 --input 1x3x64x64 --threads 1 --top 8 --json before.json --csv before.csv --trace before.trace.json --trace-runs last:3
python - <<'EOF'
import json
doc = json.load(open("before.trace.json"))
print("# trace: baseTimeNanoseconds", doc.get("baseTimeNanoseconds"), "runs", doc["otherData"].get("trace_runs"))
EOF
run COLUMNS=100 fxprof profile resnet18 --input 2x3x64x64 --threads 1 --top 5 --json batch2.json
echo "### show"
run COLUMNS=100 fxprof show before.json --group-by scope --sort flops
run COLUMNS=72 fxprof show before.json --top 5
run COLUMNS=100 fxprof show before.json --sort median_ms --ascending --top 5 --columns kind,scope,median_ms,output_shape
echo "### compare"
run COLUMNS=120 fxprof compare before.json batch2.json --top 8
run COLUMNS=100 fxprof compare before.json batch2.json --top 5 --sort ratio
echo "### selfcheck"
run fxprof selfcheck --iters 10
echo "### errors"
run fxprof profile resnet18 --input 1x5x64x64 --quiet
run fxprof show before.trace.json
run fxprof profile resnet18 --device cuda --quiet
run fxprof profile resnet18 --csv /no/such/dir/out.csv
run fxprof profile resnet18 --iters 1.5
run fxprof profile resnet18 --input -1x3
run fxprof profile resnet18 --json run.json --trace run.json
run fxprof profile resnet18 --csv /proc/run.csv
run fxprof profile resnet18 --mode isolated --trace x.json
run fxprof profile resnet18 --depth 2
run fxprof profile resnet18 --optimizer sgd
run fxprof show before.json --sort medain_ms
run fxprof profile resnet-18 --quiet
run fxprof compare before.json batch2.json --csv before.json
run fxprof --version
rm -rf "$work"
