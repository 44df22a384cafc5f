# One call: loader with the skipping reader, GEMM probe, epilogue GPU tests.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
set -o pipefail
python .lab/gemm10.py $OUT/gemm.json 2>&1 | tee $OUT/gemm.txt
timeout 150 python -m autotune.benchmarks.loader --workers 14 16 --json $OUT/loader.json 2>&1 | tee $OUT/loader.txt
timeout 60 python .lab/skip10.py $OUT/skip.json 2>&1 | tee $OUT/skip.txt
timeout 100 python -m pytest -q tests/train/test_gpu_knobs.py -k "epilogue and not compiled" 2>&1 | tee $OUT/tests.txt
timeout 170 python -m pytest -q tests/train/test_gpu_knobs.py -k "epilogue and compiled" 2>&1 | tee $OUT/tests2.txt
