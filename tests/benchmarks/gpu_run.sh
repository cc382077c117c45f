#!/usr/bin/env bash
# One command for a lent GPU machine (torch 2.11, Python 3.12, no package registry), issue 40:
#
#   bash tests/benchmarks/gpu_run.sh WHEELS_DIR [OUT_DIR]      run everything (under 9 minutes)
#   bash tests/benchmarks/gpu_run.sh --dry-run WHEELS_DIR      check the wheels, print the steps
#   bash tests/benchmarks/gpu_run.sh --download WHEELS_DIR     (here, with PyPI) fetch the wheels
#
# It installs fxprof's missing dependencies from the wheels in WHEELS_DIR (the list:
# tests/benchmarks/gpu_wheels.txt) into a private folder, puts an `fxprof` command on PATH (the
# CLI tests start it in child processes), then runs: the GPU self-check, the GPU tests in one
# serial pass (never side by side on one GPU), the rest of the suite on `-n` workers, the GPU
# benchmarks, and the CLI on resnet50 bs32 fp16 (event timer, --timer kernel, --backward,
# --compile, --compile-mode reduce-overhead) and BERT-base bs8 s128 fp16. Each step has its own
# time limit and a failed step does not stop the others. The rest of the suite runs one torch thread
# per worker (12 workers of 16 threads each on 16 cores got through 9% of it in 150 s) and names
# every test as it ends (a step cut at its limit still says which failed). Results: at most 8 files in OUT_DIR
# (default $OUT when set, else ./gpu-results): env.txt, selfcheck.txt, tests-gpu.txt,
# tests-rest.txt, benchmarks.txt, cli.txt, profiles.tar.gz, summary.txt.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
list="$here/gpu_wheels.txt"

usage="usage: gpu_run.sh [--dry-run|--download] WHEELS_DIR [OUT_DIR]"
mode=run
case "${1:-}" in
    --dry-run) mode=dry; shift ;;
    --download) mode=download; shift ;;
    -*) echo "gpu_run.sh: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
wheels="${1:-}"
if [ -z "$wheels" ] || [ "$#" -gt 2 ]; then
    echo "$usage" >&2
    exit 2
fi
# both folders as absolute paths, resolved where the script was started: the run moves to the
# repository root before its steps, where a relative OUT_DIR would name another folder
absolute() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
wheels="$(absolute "$wheels")"
if [ "$mode" != download ] && [ ! -d "$wheels" ]; then
    echo "gpu_run.sh: no wheels folder $wheels: give the folder the wheels are in (fetch them with --download)" >&2
    exit 2
fi

# NAME==VERSION lines of the list, comments and blanks left out
requirements() { sed -e 's/#.*//' -e 's/[[:space:]]//g' "$list" | grep -v '^$'; }

if [ "$mode" = download ]; then
    mkdir -p "$wheels"
    # shellcheck disable=SC2046
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$wheels" $(requirements)
    exit $?
fi

# every listed NAME==VERSION has exactly one wheel in WHEELS_DIR (wheel file names normalise
# '-' and '.' in the name to '_')
missing=0
said=()
for req in $(requirements); do
    name="${req%%==*}"; version="${req##*==}"
    norm="$(echo "$name" | tr 'A-Z.-' 'a-z__')"
    found=$(find "$wheels" -maxdepth 1 -iname "${norm}-${version}-*.whl" 2>/dev/null | wc -l)
    if [ "$found" -ne 1 ]; then
        said+=("gpu_run.sh: $found wheel(s) for $req in $wheels (need exactly 1): fetch them with --download")
        missing=$(( missing + 1 ))
    fi
done
extra=$(find "$wheels" -maxdepth 1 -type f -name '*.whl' 2>/dev/null | wc -l)
if [ "$missing" -ne 0 ]; then
    if [ "$missing" -eq "$(requirements | wc -l)" ]; then  # the wrong folder, most likely: one line
        echo "gpu_run.sh: none of the $missing listed wheels is in $wheels ($extra .whl files there): give the folder they are in, or fetch them with --download" >&2
    else
        printf '%s\n' "${said[@]}" >&2
    fi
    exit 1
fi

out="$(absolute "${2:-${OUT:-$repo/gpu-results}}")"
site="${TMPDIR:-/tmp}/fxprof-site"
bin="${TMPDIR:-/tmp}/fxprof-bin"
workers="${FXPROF_TEST_WORKERS:-12}"
resnet=(--device cuda --input 32x3x224x224 --dtype float16)
bert=("$here/gpu_models.py:bert_base" --device cuda --input input_ids=8x128:int64 --dtype float16)
llama=("$here/gpu_models.py:llama_decoder" --device cuda --dtype float16 --prompt-len 128 --new-tokens 16)

# the steps, most wanted first: "name|seconds|output file|command". Each runs for at most its
# own seconds and at most what is left of the whole run's budget (FXPROF_GPU_BUDGET_S, default
# 520 s after the install: under 9 minutes in all); a step with no time left is skipped, said so.
steps=(
    "selfcheck|40|selfcheck.txt|python3 -m fxprof selfcheck --device cuda"
    "tests-gpu|150|tests-gpu.txt|python3 -m pytest -m cuda -p no:xdist -p no:cacheprovider -q -rfE"
    "resnet50-cuda|30|cli.txt|fxprof profile resnet50 ${resnet[*]} --json $out/p/resnet50-cuda.json"
    "resnet50-kernel|40|cli.txt|fxprof profile resnet50 ${resnet[*]} --timer kernel --json $out/p/resnet50-kernel.json"
    "resnet50-backward|40|cli.txt|fxprof profile resnet50 ${resnet[*]} --backward --json $out/p/resnet50-backward.json"
    "bert-cuda|40|cli.txt|fxprof profile ${bert[*]} --json $out/p/bert-cuda.json"
    "generate-cuda|60|cli.txt|fxprof generate ${llama[*]} --json $out/p/generate-cuda"
    "bert-compiled|70|cli.txt|fxprof profile ${bert[*]} --compile --json $out/p/bert-compiled.json"
    "resnet50-compiled|70|cli.txt|fxprof profile resnet50 ${resnet[*]} --compile --json $out/p/resnet50-compiled.json"
    "resnet50-cudagraphs|70|cli.txt|fxprof profile resnet50 ${resnet[*]} --compile --compile-mode reduce-overhead --json $out/p/resnet50-cudagraphs.json"
    "tests-rest|150|tests-rest.txt|OMP_NUM_THREADS=1 python3 -m pytest -m 'not cuda and not slow' -n $workers -p no:cacheprovider -v -rfE"
    "agreement|40|benchmarks.txt|python3 $here/agreement.py --device cuda --models resnet18,resnet50"
    "overhead|60|benchmarks.txt|test ! -f $here/gpu_overhead.py || python3 $here/gpu_overhead.py"
    "after-profiler|50|benchmarks.txt|python3 $here/gpu_after_profiler.py eager; TEARDOWN_CUPTI=1 python3 $here/gpu_after_profiler.py eager"
)
budget="${FXPROF_GPU_BUDGET_S:-520}"

if [ "$mode" = dry ]; then
    echo "gpu_run.sh: $(requirements | wc -l) wheels listed, all in $wheels ($extra .whl files there); budget $budget s"
    echo "gpu_run.sh: results go to $out"
    for step in "${steps[@]}"; do
        IFS='|' read -r name seconds file command <<<"$step"
        printf '%-20s %4ss -> %-16s %s\n' "$name" "$seconds" "$file" "$command"
    done
    exit 0
fi

mkdir -p "$out/p" "$site" "$bin"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$wheels"/*.whl || exit 1
export PYTHONPATH="$repo:$site${PYTHONPATH:+:$PYTHONPATH}" PATH="$bin:$PATH" PYTHONUNBUFFERED=1
printf '#!/bin/sh\nexec python3 -m fxprof "$@"\n' >"$bin/fxprof"
chmod +x "$bin/fxprof"
cd "$repo" || exit 1
{
    date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
    python3 -c 'import torch, sys; print("python", sys.version.split()[0], "| torch", torch.__version__, "| cuda", torch.version.cuda, "| cudnn", torch.backends.cudnn.version())'
    nproc
} >"$out/env.txt" 2>&1

: >"$out/summary.txt"
deadline=$(( $(date +%s) + budget ))
for step in "${steps[@]}"; do
    IFS='|' read -r name seconds file command <<<"$step"
    start=$(date +%s)
    left=$(( deadline - start ))
    if [ "$left" -lt 10 ]; then
        echo "$name: skipped, the run's ${budget} s budget is spent" | tee -a "$out/summary.txt"
        continue
    fi
    limit=$(( seconds < left ? seconds : left ))
    echo "=== $name: $command" >>"$out/$file"
    timeout --kill-after=5 "$limit" bash -c "$command" >>"$out/$file" 2>&1
    rc=$?
    note=""; [ "$rc" -eq 124 ] && note=" (timed out)"
    echo "$name: exit $rc$note in $(( $(date +%s) - start )) s (limit $limit s)" | tee -a "$out/summary.txt"
done
tar -czf "$out/profiles.tar.gz" -C "$out" p && rm -rf "$out/p"
