#!/usr/bin/env bash
# The device check, sized for one lent machine: one H200, torch (2.11 there) + transformers + peft +
# pytest, no Ray, vLLM, Hydra or network, 128 GiB host memory, about 8 minutes in one call. Parts, in
# this order, each under a hard time limit (60 + 15 + 170 + 275 s = 520 s; part 3 only with Ray, vLLM;
# the caps get 60 s: on the H200 they passed 15 s, starting CUDA):
#   0. versions and capabilities (scripts/gpu_check_caps.py: torch, transformers, peft, the device, bf16,
#      pinned memory, the weight gather's collective, the attention kernel, vLLM's TP arguments), then
#      the plan (gpu_check.py --plan): what each item of issue 21 has in the check, in the issue's
#      order, and every table row with the planner's device and host estimates and a time estimate
#      against the rows' budget.
#   1. the gpu-marked tests (scripts/gpu_check_modes.GPU_TESTS: offload placement and exactness, the
#      bf16 reference, packed attention, activation offload, a bf16 rollout against the fp32 actor).
#   2. scripts/gpu_check.py: the table. Qwen2.5 7B, then 1.5B, then 0.5B shapes (random init from
#      scripts/model_configs), the 7B param+optimizer offload and offload_policy rows first (the seed's
#      memory table); per row peak device memory against the planner, update tokens/s and its ratio to
#      no offload, host-link GiB/s, pinned and planned host bytes, each printed as it completes. A row
#      the planner says does not fit says so; --ignore-host-gate runs rows its host estimate would stop.
#   3. where Ray and vLLM are installed too: the end-to-end run, tests/test_main_ppo_gpu.py (300 s).
# One failing part does not stop the others; the exit status is 1 if any part failed.
# Usage: bash scripts/gpu_check.sh [--ignore-host-gate]   on the GPU machine
#        bash scripts/gpu_check.sh --dry                   anywhere: the plan, then tiny shapes on CPU
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
DRY=0
TABLE_FLAGS=()
for arg in "$@"; do
  case "$arg" in
    --dry) DRY=1 ;;
    --ignore-host-gate) TABLE_FLAGS+=(--ignore-host-gate) ;;
    *) echo "gpu_check.sh: unknown option $arg (use --dry and/or --ignore-host-gate)" >&2; exit 2 ;;
  esac
done
ROWS_BUDGET_S=260  # of the 8 minutes: 30 s caps and plan, 170 s tests, 275 s the table (hard limits)

# one interpreter for both questions (each start imports torch): 3 without torch or transformers, 4 without CUDA
"$PY" -c "
import sys
try:
    import torch, transformers
except ImportError:
    sys.exit(3)
sys.exit(0 if $DRY or torch.cuda.is_available() else 4)" 2>/dev/null
case $? in
  0) ;;
  4) echo "gpu_check.sh: no CUDA device visible to $PY; run with --dry to check the script on CPU" >&2; exit 2 ;;
  *) echo "gpu_check.sh: $PY cannot import torch and transformers (set PYTHON=/path/to/python)" >&2; exit 2 ;;
esac
FAILED=()
STARTED=$SECONDS

echo "== 0/3 versions, capabilities and the plan"
timeout 60 "$PY" scripts/gpu_check_caps.py || FAILED+=("caps (exit $?)")
timeout 15 "$PY" scripts/gpu_check.py --plan --time-budget-s "$ROWS_BUDGET_S" ${TABLE_FLAGS[@]+"${TABLE_FLAGS[@]}"} \
  || FAILED+=("plan (exit $?)")

echo "== 1/3 gpu-marked tests"
TESTS=$("$PY" -c "import sys; sys.path.insert(0, 'scripts'); from gpu_check_modes import GPU_TESTS; print(' '.join(f for f, _ in GPU_TESTS))")
if "$PY" -c "import pytest" 2>/dev/null; then
  # shellcheck disable=SC2086
  timeout 170 "$PY" -m pytest -q -rs -s -m gpu -p no:cacheprovider $TESTS || FAILED+=("tests (exit $?)")
else
  echo "pytest is not installed: the gpu-marked tests were not run (pip install pytest to include them)"
fi

echo "== 2/3 the table (scripts/gpu_check.py), $ROWS_BUDGET_S s for its rows"
if [[ $DRY == 1 ]]; then
  BENCH_THREADS=1 timeout 150 "$PY" scripts/gpu_check.py --dry ${TABLE_FLAGS[@]+"${TABLE_FLAGS[@]}"} || FAILED+=("table (exit $?)")
else
  timeout $((ROWS_BUDGET_S + 15)) "$PY" scripts/gpu_check.py --time-budget-s "$ROWS_BUDGET_S" ${TABLE_FLAGS[@]+"${TABLE_FLAGS[@]}"} \
    || FAILED+=("table (exit $?)")
fi

echo "== 3/3 end to end (Ray + vLLM + FSDP2)"
if [[ $DRY == 1 ]]; then
  echo "--dry: the end-to-end run needs GPUs, not run"
elif "$PY" -c "import pytest, ray, vllm" 2>/dev/null; then
  timeout 300 "$PY" -m pytest -q -rs -m gpu -p no:cacheprovider tests/test_main_ppo_gpu.py || FAILED+=("e2e (exit $?)")
else
  echo "pytest, ray or vllm is not installed: the end-to-end run was not run (make install to include it)"
fi

echo "gpu_check: $((SECONDS - STARTED)) s"
if (( ${#FAILED[@]} )); then
  echo "gpu_check: FAILED: ${FAILED[*]}"
  exit 1
fi
echo "gpu_check: OK"
