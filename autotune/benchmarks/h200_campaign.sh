#!/usr/bin/env bash
# The fourth H200 campaign in three phases, each one device call of under 10 minutes on nvidia-h200-x2.
# Run from the repository root on the device, carry [".whl"] (../shared/device/fetch-wheels.sh av, plus
# torchao==0.17.0 for fp8):
#
#   bash autotune/benchmarks/h200_campaign.sh a        # install, datasets; the 2-GPU full study (10-min budget)
#   bash autotune/benchmarks/h200_campaign.sh b        # wait for it, pack it; the 1-GPU full study, alone
#   bash autotune/benchmarks/h200_campaign.sh c SECS   # wait, pack it; the 2-GPU headline suite; end before SECS
#
# The third campaign (session 5) measured the medium studies (issue 6) and found the 2-GPU full study
# short of 2.5x: its stock trial was loader-bound and the guide spent 4 trials on other remedies first
# (fixed: a loader-bound incumbent has its loader fixed first). This one repeats the full studies with
# that guide, the 1-GPU one alone on its machine half (in the third it shared the host with the medium
# study and its best trial's steps spread 154-196 ms), then measures stock, compile of the whole model
# and the 2-GPU best.yaml in one run (gpu_suite: parity, MFU, the best profiled: overhead, buckets), then the
# hand-picked whole-step graph with and without the all-reduce inside it (ddp.graph_overlap, new in session 5).
# (tests/train/test_gpu.py has a 2-GPU test of that capture; its ~2 minutes are not spent here: the suite's
# two step-graph rows and the study's comm remedy show whether it runs, and its parity.)
# Timeline from the start of a (s): 2-GPU study ~60-670; b packs it and runs the 1-GPU study ~690-1215;
# c packs that and runs the suite ~1230 to SECS; ~1750 s of device time with the machine's start.
#
# ($OUT returns at most 8 files a call.)
# THE MACHINE IS GIVEN BACK 30 s AFTER A CALL ENDS: issue the next call at once (decide everything
# before phase a). In the second campaign a pause between calls lost the machine, its running studies
# and ~10 minutes of device time. Every phase packs what is done into $OUT, so a lost machine loses
# only the study in flight. Studies are detached (setsid) and run on between calls. A study's
# --time-budget ends it within the budget (a trial running at the end is stopped and queued again).
# The 1-GPU study runs with one GPU and 16 of the 32 cores (taskset), as an nvidia-h200 machine would.
set -u
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
       AUTOTUNE_CACHE=/tmp/atc PYTHONUNBUFFERED=1 HTA_DISABLE_NS_ROUNDING=1
C=/tmp/camp
M="python3 -m autotune.benchmarks.campaign"
STUDY=(--steps 10 --warmup 4 --stage-trials 3)
mkdir -p "$C"

case "${1:-}" in
a)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  nvidia-smi --query-gpu=name,memory.total --format=csv > "$C/gpus.csv"
  python3 -c "import torch, optuna, torchao; print(torch.__version__, optuna.__version__, torchao.__version__)" > "$C/versions.txt" 2>&1
  # ddp.graph_overlap (NCCL captured inside the step graph) has never run on GPUs: try it on the tiny
  # preset beside the datasets' making; if it fails or hangs, the study searches without it (a hang
  # in a trial would cost its whole --timeout-per-trial)
  ( timeout 150 python3 - > "$C/overlap-check.log" 2>&1 <<'PY'
from autotune.config import config_from_dict
from autotune.train.launch import launch
from autotune.train.verify import compare
runs = {}
for overlap in (False, True):
    cfg = config_from_dict({"preset": "tiny", "batch_size": 4, "graphs": {"mode": "step", "warmup_steps": 2},
                            "ddp": {"graph_overlap": overlap, "bucket_cap_mb": 1.0}, "data": {"source": "synthetic"}})
    runs[overlap] = launch(cfg, steps=6, warmup=3, nproc=2, timeout=70)
    print(overlap, {k: runs[overlap].get(k) for k in ("error", "reason", "losses", "samples_per_s")}, flush=True)
    assert "error" not in runs[overlap]
assert compare(runs[False], runs[True], tolerance=0.01).passed
print("overlap ok")
PY
  ) &
  check=$!
  $M prepare --dir "$C" --presets full
  space=gr00t_n16
  if ! wait $check; then
    space="$C/space.yaml"
    grep -v '^  ddp.graph_overlap:' search_spaces/gr00t_n16.yaml > "$space"
  fi
  tail -3 "$C/overlap-check.log"; echo "$space" > "$C/space"; echo "space: $space"
  # no --reference: phase c's suite measures the whole-model compile beside stock and best.yaml in one
  # run, so its ~2 minutes of compilation go to the search here
  $M start full-2gpu --dir "$C" -- --preset full --nproc 2 --space "$space" "${STUDY[@]}" --trials 18 --time-budget 10m \
    --timeout-per-trial 300
  $M wait full-2gpu --dir "$C" --seconds $((560 - SECONDS)) --every 60
  ;;
b)
  $M wait full-2gpu --dir "$C" --seconds 240 --every 60
  $M pack --dir "$C" --out "$OUT" --name campaign-b --traces 5 --only full-2gpu --prefer 'full-2gpu/profiles/trial-0000/*'
  # no compile reference here either (76.0 samples/s on 1 GPU in the second campaign)
  $M start full-1gpu --dir "$C" --gpus 0 --cpus 0-15 -- --preset full --space "$(cat "$C/space" 2>/dev/null || echo gr00t_n16)" "${STUDY[@]}" --trials 16 --time-budget 510s \
    --timeout-per-trial 300
  $M wait full-1gpu --dir "$C" --seconds $((570 - SECONDS)) --every 60
  ;;
c)
  end=$(( ${2:-540} - 30 ))
  $M wait full-1gpu --dir "$C" --seconds 150 --every 30
  $M pack --dir "$C" --out "$OUT" --name campaign-c1 --traces 3 --only full-1gpu --prefer 'full-1gpu/profiles/trial-0000/*'
  kill -0 "$(cat "$C/full-1gpu.pid")" 2>/dev/null && { echo "full-1gpu still running: no suite"; exit 0; }
  best="$C/full-2gpu/best.yaml"
  [ -f "$best" ] || { echo "no $best: no suite"; exit 0; }
  mkdir -p "$OUT/suite"
  timeout $((end - SECONDS)) python3 -m autotune.benchmarks.gpu_suite --preset full --nproc 2 --steps 15 --warmup 5 \
    --timeout 240 --configs stock "$best" compile_all $(grep -q "overlap ok" "$C/overlap-check.log" && echo step_graph_tuned_overlap) step_graph_tuned --profile best --profile-dir "$C/suite-profiles" \
    --json "$OUT/suite/suite-2.json"
  ;;
*)
  echo "usage: $0 a|b|c [seconds]" >&2
  exit 2
  ;;
esac
