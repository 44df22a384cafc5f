# Session 11 pipeline: GPU tests of the new knobs, suite (stock, v12, +fused q/k/v, +fused and the 1-KiB
# cuBLASLt workspace), decide the remedies, the default run within the device time left.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
F=/tmp/final
el() { echo $(( $(date +%s) - $(cat $F/t0) )); }
step() { echo "== $(date +%T) +$(el)s $*"; }
nvidia-smi > $F/smi.txt 2>&1
step tests
timeout 330 python -m pytest -q -s tests/train/test_gpu_knobs.py -k "fused or workspace" > $F/tests.txt 2>&1
step "tests rc=$?"
step suite
timeout 860 python -m autotune.benchmarks.gpu_suite --preset full --steps 15 --warmup 5 --timeout 420 \
  --configs stock best-v12 best-v12+fused_qkv best-v12+fused_qkv_ws1 --profile none --out $F/suite > $F/suite.txt 2>&1
step "suite rc=$?"
python .lab/decide11.py $F/suite/suite-1.json search_spaces/gr00t_n16.yaml > $F/decision.txt 2>&1
step "decide rc=$?"; cat $F/decision.txt
git diff search_spaces > $F/space_diff.txt 2>&1
# the device time after the start (~120 s before t0): 1800 - 120 - ~40 s to pack and fetch
left=$(( 1640 - $(el) - 230 ))
[ $left -lt 240 ] && left=240
step "run --time-budget $left"
python -m autotune run --time-budget $left --out $F/run > $F/run.txt 2>&1
step "run rc=$?"
touch $F/DONE
