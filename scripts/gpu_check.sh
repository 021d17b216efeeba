#!/usr/bin/env bash
# The prepared GPU check: one run on one GPU, at most 565 s of steps (every step has its own time
# limit, and a step that fails does not stop the others):
#   1. a decode step under torch.cuda.set_sync_debug_mode("error") (scripts/gpu_sync_check.py);
#   2. the GPU tests: tests/test_cuda.py (hypothesis-generated ragged batches through every backend
#      with the Triton kernel compiled for real, the demo pair decoding on CUDA) and the CUDA cases
#      of tests/test_attention.py, with WORKERS pytest-xdist workers (default 8). On 2026-12-04 one
#      process ran 80 of the 86 in 130 s; 8 workers ran all 86 in 18 s, but after the tile fix 85 in
#      130 s, the one left not named; on a fresh machine all 86 in 123 s, the two oracle tests
#      taking 113 s of it on one worker, likely most of it compiling; split by dtype, all 92 in 62 s
#      (bench_results/gpu-check/README.md, runs 3-10). The step is verbose,
#      so the log names every test that finished, and a test past 150 s fails with its stack
#      (pytest-timeout);
#   3. the GPU benchmarks: attention, speculative, decode ($RESULTS/*-cuda.json; copied into
#      bench_results/, they are what the course's chapter 10 reads through minibass.course.gpu_results);
#   4. the course's chapter 10, live on the GPU.
# Results go to $RESULTS (default bench_results/gpu): the JSON and plots, one log per step, and
# gpu.txt (the GPU, the driver and the library versions). When $OUT is set, the whole folder is
# also packed into $OUT/gpu-results.tgz after every step, so that what finished comes back even if
# a later step runs out of time.
# STEPS picks some of the steps (default: all): STEPS="sync attention" bash scripts/gpu_check.sh
# The exit status is 0 when every step passed, 1 when any failed or ran out of time (all still run).
# Usage on a machine with a GPU and the dependencies installed:  PYTHONPATH=. bash scripts/gpu_check.sh
# On an H200 on 2026-12-04 the whole check took 332 s (bench_results/gpu-check/README.md, run 3).
set -uo pipefail
RESULTS=${RESULTS:-bench_results/gpu}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
started=$(date +%s)

failed=()
pack() {
    echo "== $1 finished at +$(( $(date +%s) - started )) s (exit $2)" | tee -a "$RESULTS/steps.txt"
    if [ "$2" -ne 0 ]; then failed+=("$1"); fi
    if [ -n "${OUT:-}" ]; then tar czf "$OUT/gpu-results.tgz" -C "$RESULTS" .; fi
}

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $RESULTS/NAME.log
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit $limit s): $*"
    timeout "$limit" "$@" >"$RESULTS/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$RESULTS/$name.log"
    pack "$name" "$rc"
}

{
    date -u +"date %Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python -c "import sys, torch, triton, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'transformers', transformers.__version__)"
} | tee "$RESULTS/gpu.txt"

want() { [[ " ${STEPS:-sync tests attention speculative decode course} " == *" $1 "* ]]; }
want sync && step sync 40 python scripts/gpu_sync_check.py
want tests && step tests 180 python -m pytest -v -p no:cacheprovider -n "${WORKERS:-8}" -o timeout=150 --durations=15 \
    tests/test_cuda.py tests/test_attention.py -k "${TESTS_K:-cuda}"
want attention && step attention-cuda 55 python -m minibass.bench attention --device cuda --reps 10 \
    --out "$RESULTS/attention-cuda.json" --plot "$RESULTS/attention-cuda.png"
want speculative && step speculative-cuda 190 python -m minibass.bench speculative --device cuda --batch-sizes 1 4 8 16 \
    --backends padded ragged --out "$RESULTS/speculative-cuda.json" --plot "$RESULTS/speculative-cuda.png"
want decode && step decode-cuda 60 python -m minibass.bench decode --device cuda --batch-sizes 1 8 32 --reps 3 \
    --backends default padded split ragged --out "$RESULTS/decode-cuda.json"
want course && MINIBASS_COURSE_FAST=1 step course-10 40 python tutorial/10_speedups.py
if [ ${#failed[@]} -eq 0 ]; then
    echo "all steps done in $(( $(date +%s) - started )) s"
else  # every step still ran; the exit status says that some did not pass
    echo "steps done in $(( $(date +%s) - started )) s; failed: ${failed[*]}"
    exit 1
fi
