#!/usr/bin/env bash
# The next H200 campaign in three phases, each one device call of under 10 minutes on nvidia-h200-x2.
# Run from the repository root on the device, carry [".whl"] (../shared/device/fetch-wheels.sh av, plus
# torchao==0.17.0 for fp8):
#
#   bash autotune/benchmarks/h200_campaign.sh a        # install, datasets; the 2-GPU full study (11-min budget)
#   bash autotune/benchmarks/h200_campaign.sh b        # wait for it, pack it; both 1-GPU studies side by side
#   bash autotune/benchmarks/h200_campaign.sh c SECS   # wait, pack them; the 2-GPU medium study; pack before SECS
#
# ($OUT returns at most 8 files a call: phase c packs 4 + 3.)
# THE MACHINE IS GIVEN BACK 30 s AFTER A CALL ENDS: issue the next call at once (decide everything
# before phase a). In the second campaign a pause between calls lost the machine, its running studies
# and ~10 minutes of device time. Every phase packs what is done into $OUT, so a lost machine loses
# only the study in flight. Studies are detached (setsid) and run on between calls. A study's
# --time-budget now ends it within the budget (a trial running at the end is stopped and queued again).
# The 1-GPU studies run side by side, each with one GPU and 16 of the 32 cores (taskset), as two
# nvidia-h200 machines would.
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
  $M prepare --dir "$C" --presets full
  $M start full-2gpu --dir "$C" -- --preset full --nproc 2 "${STUDY[@]}" --trials 16 --time-budget 11m \
    --timeout-per-trial 300 --reference 'compile.regions=[all]'
  $M wait full-2gpu --dir "$C" --seconds $((560 - SECONDS)) --every 60
  ;;
b)
  $M wait full-2gpu --dir "$C" --seconds 240 --every 60
  $M pack --dir "$C" --out "$OUT" --name campaign-b --traces 5 --only full-2gpu --prefer 'full-2gpu/profiles/trial-0000/*'
  # no compile reference here (measured in the 2-GPU study and, 76.0 samples/s, in the second campaign):
  # its ~3 minutes go to the search, which has ~9.5 minutes of device time left in b and c
  $M start full-1gpu --dir "$C" --gpus 0 --cpus 0-15 -- --preset full "${STUDY[@]}" --trials 16 --time-budget 9m \
    --timeout-per-trial 300
  $M start medium-1gpu --dir "$C" --gpus 1 --cpus 16-31 -- --preset medium "${STUDY[@]}" --trials 14 --time-budget 8m \
    --timeout-per-trial 240
  $M wait full-1gpu medium-1gpu --dir "$C" --seconds $((570 - SECONDS)) --every 60
  ;;
c)
  end=$(( ${2:-540} - 40 ))
  $M wait full-1gpu medium-1gpu --dir "$C" --seconds $((end - 240)) --every 60
  $M pack --dir "$C" --out "$OUT" --name campaign-c1 --traces 2 --only full-1gpu medium-1gpu \
    --prefer 'full-1gpu/profiles/trial-0000/*'
  kill -0 "$(cat "$C/full-1gpu.pid")" 2>/dev/null && echo "full-1gpu still running: no medium-2gpu" ||
  $M start medium-2gpu --dir "$C" -- --preset medium --nproc 2 "${STUDY[@]}" --trials 10 --time-budget 3m --timeout-per-trial 180
  $M wait medium-2gpu --dir "$C" --seconds $((end - SECONDS)) --every 60
  $M pack --dir "$C" --out "$OUT" --name campaign-c2 --traces 1 --only medium-2gpu
  ;;
*)
  echo "usage: $0 a|b|c [seconds]" >&2
  exit 2
  ;;
esac
