#!/usr/bin/env bash
# The device check for a single-GPU machine (torch, transformers, safetensors, numpy, pytest; no Ray,
# vLLM, Hydra or network), in under 8 minutes (each part has a hard timeout: 150 s + 280 s):
#   1. the `gpu`-marked tests (offload placement and pinned memory on CUDA, planner vs measured peak)
#   2. scripts/bench_offload.py: peak memory and update tokens/s per offload mode on random Qwen2.5
#      0.5B / 1.5B / 7B shapes (7B where the planner says it fits), ratios against no offload
# Usage: bash scripts/gpu_check.sh          on the GPU machine
#        bash scripts/gpu_check.sh --dry    anywhere: tiny shapes on CPU, GPU tests skipped (seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
DRY=0
case "${1:-}" in
  --dry) DRY=1 ;;
  "") ;;
  *) echo "gpu_check.sh: unknown option $1 (use --dry or nothing)" >&2; exit 2 ;;
esac

if [[ $DRY == 0 ]] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check.sh: no CUDA device visible to $PY; run with --dry to check the script on CPU" >&2
  exit 2
fi
"$PY" -c "import torch, transformers; print(f'gpu_check: torch {torch.__version__}, transformers {transformers.__version__}, cuda {torch.cuda.is_available()}')"

echo "== 1/2 gpu-marked tests"
timeout 150 "$PY" -m pytest -q -s -m gpu -p no:cacheprovider tests/engine/test_offload_gpu.py

echo "== 2/2 bench_offload"
if [[ $DRY == 1 ]]; then
  BENCH_THREADS=1 timeout 120 "$PY" scripts/bench_offload.py --dry
else
  timeout 280 "$PY" scripts/bench_offload.py --time-budget-s 150
fi
echo "gpu_check: OK"
