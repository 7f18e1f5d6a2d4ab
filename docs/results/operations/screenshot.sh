#!/usr/bin/env bash
# A dashboard screenshot after a few minutes of TPC-H + ClickBench-sample queries.
set -euo pipefail
SILT=/tmp/shot/silt
D=/tmp/shot/data
[ -d $D/tpch ] || $SILT bench gen tpch --sf 0.1 --out $D/tpch >/dev/null
mkdir -p $D/hits && cp -n /work/shared/data/nano_hits.parquet $D/hits/
args=()
for t in lineitem orders customer part partsupp supplier nation region; do args+=(--table "$t=file://$D/tpch/$t/"); done
args+=(--table "hits=file://$D/hits/" --table "nano=file://$D/hits/")
rm -rf /tmp/shot/cache
$SILT serve --listen 127.0.0.1:50990 --admin 127.0.0.1:50991 --cache-dir /tmp/shot/cache --auth-token demo \
  --memory-budget 64MiB --store-latency-ms 20 "${args[@]}" 2>/tmp/shot/serve.log &
PID=$!
sleep 5
for round in $(seq 1 12); do
  for q in 01 03 05 06 10 12 14 19; do
    SILT_AUTH_TOKEN=demo $SILT query --server http://127.0.0.1:50990 -f /work/shared/bench/tpch/queries/q$q.sql --format csv >/dev/null 2>&1 || true
  done
  SILT_AUTH_TOKEN=demo $SILT query --server http://127.0.0.1:50990 --format csv "SELECT \"SearchPhrase\", count(*) FROM hits WHERE \"SearchPhrase\" <> '' GROUP BY 1 ORDER BY 2 DESC LIMIT 10" >/dev/null 2>&1 || true
  sleep 8
done
U=$(mktemp -d)
/usr/bin/chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --disable-dev-shm-usage --user-data-dir=$U --hide-scrollbars \
  --window-size=1400,1900 --virtual-time-budget=8000 --screenshot=/tmp/shot/dashboard.png \
  "http://127.0.0.1:50991/?token=demo" 2>/dev/null || true
curl -s -H "authorization: Bearer demo" http://127.0.0.1:50991/stats > /tmp/shot/stats.json
kill $PID
echo done
