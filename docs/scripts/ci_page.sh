#!/usr/bin/env bash
# Regenerates the example output of docs/ci.md: three profiles of a small CNN compared with the
# gate, the Markdown summary, and `fxprof ab` on two "checkouts" of it (base/ and the change).
# Run from the project root with fxprof installed (or PYTHONPATH set); paste the blocks.
#
#   bash docs/scripts/ci_page.sh > /tmp/ci_page.txt
set -uo pipefail
root="$(pwd)"
work="$(mktemp -d)"
cd "$work"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export COLUMNS=110
fxprof() { python -m fxprof "$@"; }

run() {  # print the command as typed, then what it printed (stdout and stderr, in order)
    echo "\$ $*"
    eval "$@" 2>&1
    local code=$?
    echo "(exit $code)"
    return 0
}

mkdir -p base
cat > base/tiny.py <<'PY'
import torch
from torch import nn


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).eval()
PY
# the change: a third convolution (the pull request to gate)
cat > tiny.py <<'PY'
import torch
from torch import nn


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).eval()
PY
echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(uptime | sed 's/.*load/load/')"
for args in "base.json --input 1x3x64x64" "same.json --input 1x3x64x64" "batch2.json --input 2x3x64x64"; do
    set -- $args
    python -m fxprof profile base/tiny.py:make "${@:2}" --threads 1 --iters 20 --peaks off --json "$1" --quiet >/dev/null
done
run fxprof compare base.json batch2.json --fail-on slower --top 5
run fxprof compare base.json same.json --fail-on slower --top 5
run fxprof compare base.json batch2.json --fail-on slower --top 5 --markdown summary.md ">/dev/null"
cat summary.md
run fxprof ab base/tiny.py:make tiny.py:make --input 1x3x64x64 --threads 1 --fail-on slower --quiet
run fxprof ab base/tiny.py:make base/tiny.py:make --input 1x3x64x64 --threads 1 --fail-on slower --quiet
echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(uptime | sed 's/.*load/load/')"
