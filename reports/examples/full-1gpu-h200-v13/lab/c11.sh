# Device entry: install the carried wheels, copy the tree to /tmp/tree, start $PIPELINE detached, then watch.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
rm -rf /tmp/tree /tmp/final && mkdir -p /tmp/tree /tmp/final
tar --exclude=./.whl -cf - . | (cd /tmp/tree && tar xf -)
echo "$T0" > /tmp/final/t0
(cd /tmp/tree && setsid nohup bash .lab/${PIPELINE:-p11.sh} > /tmp/final/pipeline.log 2>&1 < /dev/null &)
sleep 2
bash .lab/watch.sh "${1:-540}"
