# watch.sh SECS [collect]: wait up to SECS (or until the pipeline is DONE), print progress, pack results into $OUT.
set -u
end=$(( $(date +%s) + $1 ))
while [ "$(date +%s)" -lt "$end" ] && [ ! -e /tmp/final/DONE ]; do sleep 15; done
echo "--- $(date +%T) pipeline.log"; tail -n 40 /tmp/final/pipeline.log
for f in /tmp/final/*.txt; do echo "--- $f"; tail -n 25 "$f"; done
if [ "${2:-}" = collect ] || [ -e /tmp/final/DONE ]; then
  (cd /tmp && tar --exclude='*.pt2' -czf "$OUT/final.tgz" final) ; ls -la "$OUT"
fi
cp /tmp/final/pipeline.log "$OUT/" 2>/dev/null
true
