#!/usr/bin/env bash
# The fifth H200 campaign in three phases, each one device call of under 10 minutes on nvidia-h200-x2.
# Run from the repository root on the device, carry [".whl"] (../shared/device/fetch-wheels.sh av, plus
# torchao==0.17.0 for fp8):
#
#   bash autotune/benchmarks/h200_campaign.sh a        # install, dataset, checks; the 2-GPU suite (detached)
#   bash autotune/benchmarks/h200_campaign.sh b        # wait for it, send it; the 2-GPU full study (10-min budget)
#   bash autotune/benchmarks/h200_campaign.sh c SECS   # wait, pack it; 1-GPU suite + gradient arrival; end before SECS
#
# The fourth campaign (session 6, commit 0ddf812) met 2.5x on 1 and 2 GPUs (4.36x, 4.28x) and left MFU
# short: 39.9 % on 1 GPU, ~30 % on 2 (115.6 ms a step against 87.5 on one GPU: exposed all-reduce). Causes
# found on the CPU after it are what this campaign measures (BENCHMARKS.md, "fourth campaign"):
#   1. the flat-buffer reducer's buckets were in declared order, held back by the action/state encoders
#      (fixed: rebuilt in arrival order after the first step) -> suite rows step_graph_tuned{,_overlap};
#   2. whole-model compile makes the backward one node: every gradient arrives in its last 6 % (CPU) ->
#      suite rows v4 best with compile block by block (v4-blocks), and with bf16 compression too; the
#      gradient-arrival benchmark on the full model on one GPU (phase c).
# Then whether the tuner finds it (the 2-GPU study with the fixed guide), and 1-GPU MFU in a suite row
# (a 1-GPU step graph no longer zeroes and adds into kept gradient buffers: ~5 ms of the 87.5-ms step,
# by the trace; its rows compare with the fourth campaign's 87.5 ms, another run).
# Timeline from the start of a (s): suite ~100-700; study ~720-1330; c's rows ~1350-1700; ~1750 s of
# device time with the machine's start.
#
# ($OUT returns at most 8 files a call.)
# THE MACHINE IS GIVEN BACK 30 s AFTER A CALL ENDS: issue the next call at once (decide everything
# before phase a). Work is detached (setsid) and runs on between calls; every phase sends what is done.
set -u
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
       AUTOTUNE_CACHE=/tmp/atc PYTHONUNBUFFERED=1 HTA_DISABLE_NS_ROUNDING=1
C=/tmp/camp
M="python3 -m autotune.benchmarks.campaign"
STUDY=(--steps 10 --warmup 4 --stage-trials 3)
SUITE=(--preset full --steps 15 --warmup 5 --timeout 420)  # a cold whole-model compile on 2 ranks: ~200 s
mkdir -p "$C"

variants() {  # $1: a best.yaml, $2: a prefix; writes $C/<prefix><variant>/best.yaml (the suite names rows by folder)
  python3 - "$1" "$C/$2" <<'PY'
import sys
from pathlib import Path
from autotune.benchmarks.suite_configs import ALL_REGIONS
from autotune.config import load_config, save_config
src, prefix = sys.argv[1], sys.argv[2]
for name, hook in {"": None, "-blocks": "none", "-blocks-bf16": "bf16"}.items():
    cfg = load_config(src)
    if hook is not None:  # every region compiled block by block, with this gradient compression
        cfg.compile.regions, cfg.ddp.comm_hook = list(ALL_REGIONS), hook
    out = Path(f"{prefix}{name}/best.yaml")
    out.parent.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out)
    print(out)
PY
}

case "${1:-}" in
a)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  nvidia-smi --query-gpu=name,memory.total --format=csv > "$C/gpus.csv"
  python3 -c "import torch, optuna, torchao; print(torch.__version__, optuna.__version__, torchao.__version__)" > "$C/versions.txt" 2>&1
  # the GPU tests of this session's changes, beside the dataset's making: the reducer's rebuilt buckets with
  # the NCCL all-reduce captured inside the step graph (2 GPUs), and one rank's gradients written afresh
  timeout 240 python3 -m pytest -q -rA -p no:cacheprovider tests/train/test_gpu.py -k "all_reduce_inside or afresh" \
    > "$C/gpu-tests.log" 2>&1 &
  $M prepare --dir "$C" --presets full
  wait; grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$C/gpu-tests.log"
  variants reports/examples/full-2gpu-h200-v4/best.yaml v4-2gpu
  overlap=$(grep -q "^PASSED.*all_reduce_inside" "$C/gpu-tests.log" && echo step_graph_tuned_overlap)
  $M start suite-2 --dir "$C" --module autotune.benchmarks.gpu_suite -- "${SUITE[@]}" --nproc 2 \
    --configs stock "$C/v4-2gpu/best.yaml" "$C/v4-2gpu-blocks/best.yaml" "$C/v4-2gpu-blocks-bf16/best.yaml" $overlap step_graph_tuned \
    --profile best --profile-dir "$C/suite-2-profiles" --json "$C/suite-2.json"
  $M wait suite-2 --dir "$C" --seconds $((570 - SECONDS)) --every 60
  ;;
b)
  $M wait suite-2 --dir "$C" --seconds 180 --every 30; running=$?  # 3: still running (kill -0 would count a zombie)
  mkdir -p "$OUT/suite"; cp "$C"/suite-2.* "$OUT/suite/" 2>/dev/null
  [ "$running" = 3 ] && { echo "suite-2 still running: stopping it"; kill -- -"$(cat "$C/suite-2.pid")"; sleep 5; }
  $M start full-2gpu --dir "$C" -- --preset full --nproc 2 --space gr00t_n16 "${STUDY[@]}" --trials 18 --time-budget 10m \
    --timeout-per-trial 300
  $M wait full-2gpu --dir "$C" --seconds $((570 - SECONDS)) --every 60
  ;;
c)
  end=$(( ${2:-540} - 30 ))
  $M wait full-2gpu --dir "$C" --seconds 200 --every 30; running=$?
  $M pack --dir "$C" --out "$OUT" --name campaign-c --traces 2 --only full-2gpu --prefer 'full-2gpu/profiles/trial-0000/*'
  [ "$running" = 3 ] && { echo "full-2gpu still running: no 1-GPU rows"; exit 0; }
  variants reports/examples/full-1gpu-h200-v4/best.yaml v4-1gpu
  mkdir -p "$OUT/one"
  CUDA_VISIBLE_DEVICES=1 taskset -c 16-31 timeout $((end - SECONDS)) python3 -m autotune.benchmarks.grad_arrival --preset full \
    --batch-size 16 --json "$OUT/one/grad-arrival.json" > "$OUT/one/grad-arrival.md" 2>&1 &
  CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 timeout $((end - SECONDS)) python3 -m autotune.benchmarks.gpu_suite "${SUITE[@]}" --nproc 1 \
    --configs stock "$C/v4-1gpu/best.yaml" "$C/v4-1gpu-blocks/best.yaml" --profile best --json "$OUT/one/suite-1.json"
  # (the profile's top kernels say whether the ~585 float adds a step of the kept gradient buffers are gone)
  wait
  cat "$OUT/one/grad-arrival.md"
  ;;
*)
  echo "usage: $0 a|b|c [seconds]" >&2
  exit 2
  ;;
esac
