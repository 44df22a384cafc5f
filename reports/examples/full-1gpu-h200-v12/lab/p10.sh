# Session 10 pipeline: GPU tests, suite (stock, v11, +attended, +attended_epilogue), decide remedies, default run.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
F=/tmp/final
step() { echo "== $(date +%T) +$(( $(date +%s) - $(cat $F/t0) ))s $*"; }
nvidia-smi > $F/smi.txt 2>&1
step tests
timeout 420 python -m pytest -q tests/train/test_gpu_knobs.py -k "master or attended or beside or epilogue" > $F/tests.txt 2>&1
step "tests rc=$?"
step suite
timeout 1000 python -m autotune.benchmarks.gpu_suite --preset full --steps 15 --warmup 5 --timeout 420 \
  --configs stock best-v11 best-v11+attended best-v11+attended_epilogue --profile none --out $F/suite > $F/suite.txt 2>&1
step "suite rc=$?"
python .lab/decide10.py $F/suite/suite-1.json search_spaces/gr00t_n16.yaml > $F/decision.txt 2>&1
step "decide rc=$?"; cat $F/decision.txt
git diff --stat search_spaces > $F/space_diff.txt 2>&1; git diff search_spaces >> $F/space_diff.txt 2>&1
el=$(( $(date +%s) - $(cat $F/t0) ))
if [ $el -gt 820 ]; then TR="--trials 2"; else TR=""; fi
step "run $TR"
python -m autotune run $TR --out $F/run > $F/run.txt 2>&1
step "run rc=$?"
touch $F/DONE
