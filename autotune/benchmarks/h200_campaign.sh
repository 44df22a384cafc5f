#!/usr/bin/env bash
# The next H200 campaign in phases, each one device call of under 10 minutes on nvidia-h200-x2,
# called back to back (the machine stays held 30 s after a call; the studies are detached and
# run on between calls). Run from the repository root on the device:
#
#   bash autotune/benchmarks/h200_campaign.sh a   # install, datasets, GPU tests, profiler overhead, start 1-GPU studies
#   bash autotune/benchmarks/h200_campaign.sh b   # wait for them, start the 2-GPU full study
#   bash autotune/benchmarks/h200_campaign.sh c   # wait for it, profile whole-step graphs on 1 and 2 GPUs, pack into $OUT
#   bash autotune/benchmarks/h200_campaign.sh d   # the 2-GPU medium study, pack (if device time is left)
#
# carry [".whl"] (../shared/device/fetch-wheels.sh av; add a torchao wheel for fp8). Phase a
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
  taskset -c 0-15 $M prepare --dir "$C" --presets full medium --gpu-tests tests/profiling/test_gpu.py tests/train/test_gpu.py
  taskset -c 0-15 python3 -m autotune.benchmarks.profiler_overhead --preset full --details ops,spans --rounds 3 --json "$C/profiler_overhead.json" \
    > "$C/profiler_overhead.log" 2>&1
  $M start full-1gpu --dir "$C" --gpus 0 --cpus 0-15 -- --preset full "${STUDY[@]}" --trials 16 \
    --timeout-per-trial 420 --reference 'compile.regions=[all]'
  $M start medium-1gpu --dir "$C" --gpus 1 --cpus 16-31 -- --preset medium "${STUDY[@]}" --trials 14 --timeout-per-trial 300
  $M wait full-1gpu medium-1gpu --dir "$C" --seconds $((540 - SECONDS)) --every 60
  ;;
b)
  $M wait full-1gpu medium-1gpu --dir "$C" --seconds 300 --every 60
  $M start full-2gpu --dir "$C" -- --preset full --nproc 2 "${STUDY[@]}" --trials 12 --timeout-per-trial 420
  $M wait full-2gpu --dir "$C" --seconds $((540 - SECONDS)) --every 60
  ;;
c)
  $M wait full-2gpu --dir "$C" --seconds 300 --every 60
  # issue 5: full under whole-step graph capture, 1 and 2 GPUs, traces kept for classify --hta
  python3 -c "from autotune.config import save_config; from autotune.config.stock import stock_config
c = stock_config('gr00t_n16', 'full'); c.graphs.mode = 'step'; c.optimizer.impl = 'fused'
c.data.num_workers, c.data.prefetch_factor, c.data.device_prefetch = 8, 4, 2
save_config(c, '$C/step_graph_tuned.yaml')"
  python3 -m autotune profile --config "$C/step_graph_tuned.yaml" --steps 4 --out "$C/prof-step-graph-1gpu" > "$C/prof1.log" 2>&1
  python3 -m autotune profile --config "$C/step_graph_tuned.yaml" --steps 4 --nproc 2 --out "$C/prof-step-graph-2gpu" > "$C/prof2.log" 2>&1
  $M pack --dir "$C" --out "$OUT" --name campaign --traces 7
  ;;
d)
  $M start medium-2gpu --dir "$C" -- --preset medium --nproc 2 "${STUDY[@]}" --trials 10 --timeout-per-trial 300
  $M wait medium-2gpu --dir "$C" --seconds $((520 - SECONDS)) --every 60
  $M pack --dir "$C" --out "$OUT" --name campaign-d --traces 2
  ;;
*)
  echo "usage: $0 a|b|c|d" >&2
  exit 2
  ;;
esac
