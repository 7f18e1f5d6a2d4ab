#!/usr/bin/env bash
# Memory tier (arrow form) accounting vs the server's RSS growth after scanning
# the string columns of 1M hits-like rows. Usage: measure.sh SILT_BINARY
set -euo pipefail
SILT=$1
rm -rf /tmp/acct/cache
$SILT serve --listen 127.0.0.1:50980 --admin 127.0.0.1:50981 --cache-dir /tmp/acct/cache --memory-form arrow \
  --memory-budget 8GiB --disk-budget 0 --table "hits=file:///tmp/acct/data/" 2>/dev/null &
PID=$!
sleep 4
rss() { awk '/VmRSS/ {print $2 * 1024}' /proc/$PID/status; }
before=$(rss); t0=$(date +%s.%N)
for c in URL Title Referer SearchPhrase; do
  $SILT query --server http://127.0.0.1:50980 --format csv "SELECT count(*) FROM hits WHERE \"$c\" LIKE '%zzqx%'" >/dev/null
done
t1=$(date +%s.%N); sleep 2
after=$(rss)
tier=$(curl -s http://127.0.0.1:50981/stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["tiers"]["memory"]["bytes"])')
kill $PID; wait $PID 2>/dev/null || true
python3 -c "b,a,t,t0,t1=$before,$after,$tier,$t0,$t1; print(f'cold 4 scans {t1-t0:.2f} s, tier {t/2**20:.1f} MiB, RSS growth {(a-b)/2**20:.1f} MiB, tier/RSS-growth {t/max(a-b,1):.2f}')"
