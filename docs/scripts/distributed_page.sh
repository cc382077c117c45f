#!/usr/bin/env bash
# Produces the real output quoted in docs/distributed.md (CPU, gloo, 2 processes on one machine):
#   bash docs/scripts/distributed_page.sh OUTDIR
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-/tmp/fxprof-distributed}"
mkdir -p "$out" && cd "$out"
export GLOO_SOCKET_IFNAME=lo PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
echo "### C1"  # the command of the issue
torchrun --nproc-per-node 2 -m fxprof profile resnet18 --input 1x3x64x64 --json run.json --top 8 2>/dev/null
echo "### C2"
python -m fxprof show run.json --group-by rank
echo "### S1"  # a model with an all_reduce; rank 1 naps 60 ms per run on purpose
FXPROF_TEST_SLOW_RANK=1 FXPROF_TEST_SLOW_MS=60 torchrun --nproc-per-node 2 -m fxprof profile "$root/tests/distributed_worker.py:straggler_model" \
    --input 4x16 --warmup 2 --iters 20 --json slow.json --trace slow.trace.json --top 0 2>/dev/null
echo "### S2"
python -m fxprof show slow.json --group-by rank
echo "### S3"
python -m fxprof show slow.json --group-by comm
echo "### E"
torchrun --nproc-per-node 2 "$root/docs/scripts/distributed_example.py" 2>/dev/null
echo "### F1"  # FSDP2's forward: all-gather, wait and reshard as rows (docs/distributed.md, sharded models)
torchrun --nproc-per-node 2 -m fxprof profile "$root/tests/sharded_worker.py:sharded_model" --input 8x16 --warmup 2 \
    --iters 20 --json fsdp.json 2>/dev/null
echo "### F2"  # an FSDP2 training step: the backward's all-gathers and reduce-scatters as rows too
torchrun --nproc-per-node 2 -m fxprof profile "$root/tests/sharded_worker.py:sharded_model" --input 8x16 --backward \
    --warmup 2 --iters 20 --json fsdp_bw.json 2>/dev/null
echo "### T1"  # a tensor-parallel block: the collectives parallelize_module inserts
torchrun --nproc-per-node 2 -m fxprof profile "$root/tests/sharded_worker.py:tensor_parallel_block" --input 8x16 \
    --warmup 2 --iters 20 2>/dev/null
echo "### O1"  # FSDP2 overlap: four blocks prefetching, asynchronous all-gathers, a training step
torchrun --nproc-per-node 2 -m fxprof profile "$root/tests/overlap_worker.py:prefetched_async" --input 16x64 --backward \
    --warmup 2 --iters 20 --json ov.json --top 0 2>/dev/null | grep "^FSDP all-gathers"
python -m fxprof show ov.json --top 0 --overlap | sed -n '/^layer/,$p'
echo "### O2"  # the same with FSDP's defaults: synchronous all-gathers
torchrun --nproc-per-node 2 -m fxprof profile "$root/tests/overlap_worker.py:prefetched" --input 16x64 \
    --warmup 2 --iters 20 --top 0 2>/dev/null | grep "^FSDP all-gathers"
echo "### F3"  # FSDP2 in a session: fxprof.session(model, backward=True) over a training loop
torchrun --nproc-per-node 2 "$root/docs/scripts/fsdp_session.py" fsdp_session.json 2>/dev/null
python -m fxprof show fsdp_session.json --top 8
python -m fxprof show fsdp_session.json --group-by scope --depth 2
python -m fxprof show fsdp_session.json --group-by comm
python -m fxprof show fsdp_session.json --top 0 --overlap | sed -n '/^FSDP all-gathers/p;/^layer/,$p'
