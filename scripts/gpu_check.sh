#!/usr/bin/env bash
# The prepared GPU check (one run, < 8 minutes on one GPU): the attention and hot-path tests with
# the Triton kernel compiled for real, a decode step under torch.cuda.set_sync_debug_mode("error"),
# then the GPU benchmarks and the course's GPU chapter. Results land in $OUT (or bench_results/):
# the *-cuda.json files are what the course reads (tutorial/10_speedups.py, minibass.course.gpu_results).
# Usage on a machine with a GPU and the dependencies installed:  PYTHONPATH=. bash scripts/gpu_check.sh
set -uo pipefail
OUT=${OUT:-bench_results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/gpu.txt"
timeout 240 python -m pytest -q -x tests/test_attention.py tests/test_hot_path.py -k "cuda or specification or hot" 2>&1 | tee "$OUT/gpu-tests.log"
timeout 60 python scripts/gpu_sync_check.py 2>&1 | tee "$OUT/gpu-sync.log"
timeout 120 python -m minibass.bench attention --device cuda --reps 20 \
    --out "$OUT/attention-cuda.json" --plot "$OUT/attention-cuda.png" 2>&1 | tee "$OUT/attention-cuda.log"
timeout 90 python -m minibass.bench speculative --device cuda --batch-sizes 1 2 4 8 16 --backends padded split ragged \
    --out "$OUT/speculative-cuda.json" --plot "$OUT/speculative-cuda.png" 2>&1 | tee "$OUT/speculative-cuda.log"
timeout 90 python -m minibass.bench decode --device cuda --batch-sizes 1 8 32 \
    --out "$OUT/decode-cuda.json" 2>&1 | tee "$OUT/decode-cuda.log"
MINIBASS_COURSE_FAST=1 MPLBACKEND=Agg timeout 90 python tutorial/10_speedups.py 2>&1 | tee "$OUT/course-10-cuda.log"
