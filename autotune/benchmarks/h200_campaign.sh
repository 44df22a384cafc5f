#!/usr/bin/env bash
# The H200 campaign in three phases, each one device call of under 10 minutes on nvidia-h200-x2,
# called back to back (the machine stays held 30 s after a call; the studies are detached and
# run on between calls). Run from the repository root on the device:
#
#   bash autotune/benchmarks/h200_campaign.sh a        # install, datasets + GPU tests, start both 1-GPU studies
#   bash autotune/benchmarks/h200_campaign.sh b        # wait for them; whole-step graph profiles on 1 and 2 GPUs
#                                                      # (issue 5); pack the 1-GPU results; start the 2-GPU full study
#   bash autotune/benchmarks/h200_campaign.sh c SECS   # wait for it, the 2-GPU medium study, pack before SECS elapse
#
# carry [".whl"] (../shared/device/fetch-wheels.sh av, plus torchao==0.17.0 for fp8). Phase a
# installs the wheels into /tmp/site, which later calls on the same machine reuse.
# The 1-GPU studies run side by side, each with one GPU and 16 of the 32 cores (taskset), as
# two nvidia-h200 machines would.
set -u
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
       AUTOTUNE_CACHE=/tmp/atc PYTHONUNBUFFERED=1 HTA_DISABLE_NS_ROUNDING=1
C=/tmp/camp
M="python3 -m autotune.benchmarks.campaign"
STUDY=(--space gr00t_n16 --steps 10 --warmup 4 --stage-trials 3)
mkdir -p "$C"

case "${1:-}" in
a)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  nvidia-smi --query-gpu=name,memory.total --format=csv > "$C/gpus.csv"
  python3 -c "import torch, optuna, torchao; print(torch.__version__, optuna.__version__, torchao.__version__)" > "$C/versions.txt" 2>&1
  # GPU tests on GPU 1 while the datasets are made on the CPU
  (CUDA_VISIBLE_DEVICES=1 timeout 300 python3 -m pytest -q -p no:cacheprovider tests/profiling/test_gpu.py tests/train/test_gpu.py \
     > "$C/gpu_tests.log" 2>&1; echo "exit $?" >> "$C/gpu_tests.log") &
  $M prepare --dir "$C" --presets full medium
  wait
  tail -3 "$C/gpu_tests.log"
  $M start full-1gpu --dir "$C" --gpus 0 --cpus 0-15 -- --preset full "${STUDY[@]}" --trials 16 \
    --timeout-per-trial 300 --reference 'compile.regions=[all]'
  $M start medium-1gpu --dir "$C" --gpus 1 --cpus 16-31 -- --preset medium "${STUDY[@]}" --trials 14 --timeout-per-trial 240
  $M wait full-1gpu medium-1gpu --dir "$C" --seconds $((565 - SECONDS)) --every 60
  ;;
b)
  $M wait full-1gpu medium-1gpu --dir "$C" --seconds 330 --every 60
  # issue 5: full under whole-step graph capture (fed by the loader), 1 and 2 GPUs, traces kept for classify --hta
  python3 -c "from autotune.config import save_config; from autotune.config.stock import stock_config
c = stock_config('gr00t_n16', 'full'); c.graphs.mode = 'step'; c.optimizer.impl = 'fused'
c.data.num_workers, c.data.prefetch_factor, c.data.device_prefetch, c.data.pin_memory = 14, 4, 2, True
save_config(c, '$C/step_graph_tuned.yaml')"
  python3 -m autotune profile --config "$C/step_graph_tuned.yaml" --steps 4 --out "$C/prof-step-graph-1gpu" > "$C/prof1.log" 2>&1
  tail -2 "$C/prof1.log"
  python3 -m autotune profile --config "$C/step_graph_tuned.yaml" --steps 4 --nproc 2 --out "$C/prof-step-graph-2gpu" > "$C/prof2.log" 2>&1
  tail -2 "$C/prof2.log"
  $M pack --dir "$C" --out "$OUT" --name campaign-b --traces 7 --only full-1gpu medium-1gpu prof-step-graph-1gpu prof-step-graph-2gpu \
    --prefer 'prof-step-graph-*' 'full-1gpu/profiles/trial-0000/*'
  $M start full-2gpu --dir "$C" -- --preset full --nproc 2 "${STUDY[@]}" --trials 12 --timeout-per-trial 300
  $M wait full-2gpu --dir "$C" --seconds $((570 - SECONDS)) --every 60
  ;;
c)
  end=$(( ${2:-540} - 40 ))
  $M wait full-2gpu --dir "$C" --seconds $((end - 200)) --every 60
  kill -0 "$(cat "$C/full-2gpu.pid")" 2>/dev/null && echo "full-2gpu still running: no medium-2gpu" ||
  $M start medium-2gpu --dir "$C" -- --preset medium --nproc 2 "${STUDY[@]}" --trials 10 --timeout-per-trial 240
  $M wait medium-2gpu --dir "$C" --seconds $((end - SECONDS)) --every 60
  $M pack --dir "$C" --out "$OUT" --name campaign-c --traces 7 --only full-2gpu medium-2gpu \
    --prefer 'full-2gpu/profiles/trial-0000/*'
  ;;
*)
  echo "usage: $0 a|b|c [seconds]" >&2
  exit 2
  ;;
esac
