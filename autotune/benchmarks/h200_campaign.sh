#!/usr/bin/env bash
# The sixth H200 campaign in three phases, each one device call of under 10 minutes on nvidia-h200-x2.
# Run from the repository root on the device, carry [".whl"] (../shared/device/fetch-wheels.sh av, plus
# torchao==0.17.0 for fp8):
#
#   bash autotune/benchmarks/h200_campaign.sh a        # install, dataset, GPU tests; the 2-GPU suite (detached)
#   bash autotune/benchmarks/h200_campaign.sh b        # wait for it, send it; the 2-GPU full study (9-min budget)
#   bash autotune/benchmarks/h200_campaign.sh c SECS   # wait, pack it; the 1-GPU full study on GPU 0; end before SECS
#
# The fifth campaign (session 7, commit d022628) met MFU >= 40 % on one GPU (the fourth campaign's 1-GPU
# best.yaml, gradients written afresh: 79.2 ms, 41.7-45.2 % in four runs) and left two GPUs at ~31 %:
# per GPU 107.7 ms a step (compiled block by block) against 79.2. What this campaign measures
# (BENCHMARKS.md, "fifth campaign"):
#   1. the reducer now copies gradients written afresh into its buckets (no zeroing, no accumulating add:
#      521 add kernels + 9 fills, 7.3 ms a step in the fifth campaign's 2-GPU trace) and NCCL averages in the
#      collective (64 division kernels, 3.2 ms) -> suite rows v5 best ([all]) and v5-blocks against stock,
#      the best profiled (its trace sent: are the adds and divisions gone?);
#   2. the compile remedy on several ranks is block by block (297.0 vs 283.8 samples/s in the fifth suite)
#      -> the 2-GPU study: does the guide reach it, and what MFU;
#   3. the 1-GPU study with the current tuner: MFU of its own best.yaml (the fifth campaign measured the
#      fourth's best.yaml).
# Timeline from the start of a (s): GPU tests + dataset ~100; suite ~100-450; study ~560-1110; c's 1-GPU
# study ~1130-1700 (its --time-budget what is left); ~1750 s of device time with the machine's start.
#
# ($OUT returns at most 8 files a call.)
# THE MACHINE IS GIVEN BACK 30 s AFTER A CALL ENDS: issue the next call at once (decide everything
# before phase a). Work is detached (setsid) and runs on between calls; every phase sends what is done.
# `campaign wait` exits 3 when its work is still running at its deadline (bash's kill -0 would count an
# unreaped zombie as running: the fifth campaign's phase c lost its 1-GPU rows to that).
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
for name, hook in {"": None, "-blocks": "none"}.items():
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
  # the GPU tests of the reducer (NCCL: copies, ReduceOp.AVG, inside and outside the graph, against eager DDP)
  # and of one rank's gradients written afresh, beside the dataset's making
  timeout 300 python3 -m pytest -q -rA -p no:cacheprovider tests/train/test_gpu.py \
    -k "all_reduce_inside or afresh or eager_ddp" > "$C/gpu-tests.log" 2>&1 &
  $M prepare --dir "$C" --presets full
  wait; grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$C/gpu-tests.log"
  grep -q "^PASSED.*eager_ddp" "$C/gpu-tests.log" || { echo "the reducer's GPU test did not pass"; tail -40 "$C/gpu-tests.log"; exit 1; }
  variants reports/examples/full-2gpu-h200-v5/best.yaml v5-2gpu
  $M start suite-2 --dir "$C" --module autotune.benchmarks.gpu_suite -- "${SUITE[@]}" --nproc 2 \
    --configs stock "$C/v5-2gpu/best.yaml" "$C/v5-2gpu-blocks/best.yaml" step_graph_tuned_overlap \
    --profile best --profile-dir "$C/suite-2-profiles" --json "$C/suite-2.json"
  $M wait suite-2 --dir "$C" --seconds $((570 - SECONDS)) --every 60
  ;;
b)
  $M wait suite-2 --dir "$C" --seconds 180 --every 30; running=$?  # 3: still running
  mkdir -p "$OUT/suite"; cp "$C"/suite-2.* "$OUT/suite/" 2>/dev/null
  [ "$running" = 3 ] && { echo "suite-2 still running: stopping it"; kill -- -"$(cat "$C/suite-2.pid")"; sleep 5; }
  trace=$(find "$C/suite-2-profiles" -name 'rank0*.json.gz' 2>/dev/null | head -1)  # adds and divisions gone?
  [ -n "$trace" ] && cp "$trace" "$OUT/suite/best-rank0.pt.trace.json.gz"
  $M start full-2gpu --dir "$C" -- --preset full --nproc 2 --space gr00t_n16 "${STUDY[@]}" --trials 18 --time-budget 9m \
    --timeout-per-trial 300
  $M wait full-2gpu --dir "$C" --seconds $((570 - SECONDS)) --every 60
  ;;
c)
  end=$(( ${2:-540} - 20 ))
  $M wait full-2gpu --dir "$C" --seconds 150 --every 30; running=$?
  $M pack --dir "$C" --out "$OUT" --name campaign-c --traces 2 --only full-2gpu --prefer 'full-2gpu/profiles/trial-0000/*'
  [ "$running" = 3 ] && { echo "full-2gpu still running: no 1-GPU study"; exit 0; }
  # the 1-GPU study alone on GPU 0 and its cores, in what is left of the call less ~90 s for its parity and report
  budget=$((end - SECONDS - 90))
  CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 timeout $((end - SECONDS)) python3 -m autotune run --out "$C/full-1gpu" --preset full \
    --space gr00t_n16 "${STUDY[@]}" --trials 16 --time-budget "${budget}s" --timeout-per-trial 240 > "$C/full-1gpu.log" 2>&1
  tail -12 "$C/full-1gpu.log"
  mkdir -p "$OUT/one"
  $M pack --dir "$C" --out "$OUT/one" --name campaign-c1 --traces 0 --only full-1gpu full-1gpu.log
  ;;
*)
  echo "usage: $0 a|b|c [seconds]" >&2
  exit 2
  ;;
esac
