#!/usr/bin/env bash
# spindle-load --keepalive against wrk -t1 -c100, same server, same file.
#
# nginx (1 worker, access_log off, 127.0.0.1 only, config generated in a
# temp dir) serves a 1 KiB file, pinned to one core; the load generator runs
# pinned to the other core. Rounds are interleaved (wrk, spindle-load, wrk,
# spindle-load, ...) so background noise hits both; medians are reported.
#
# Usage: vs-wrk.sh [ROUNDS] [SECONDS]      (defaults: 3 rounds of 10 s)
# Env:   SPINDLE_LOAD=path/to/spindle-load (default: build it, release)
#        SERVER_CPU=0 CLIENT_CPU=1 PORT=18480 OUT=dir
# Needs: nginx, wrk, taskset (util-linux); /usr/bin/time (package `time`)
#        for the CPU-per-request column, optional.
set -euo pipefail

ROUNDS=${1:-3}
SECS=${2:-10}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PORT=${PORT:-18480}
CONNS=100

for tool in nginx wrk taskset; do
    command -v "$tool" >/dev/null || { echo "vs-wrk.sh: $tool is not installed (apt-get install nginx wrk util-linux)" >&2; exit 2; }
done

if [[ -z "${SPINDLE_LOAD:-}" ]]; then
    here=$(cd "$(dirname "$0")/../../.." && pwd)
    (cd "$here" && cargo build --release -q -p spindle-load)
    SPINDLE_LOAD="${CARGO_TARGET_DIR:-$here/target}/release/spindle-load"
fi

WORK=$(mktemp -d /tmp/vs-wrk.XXXXXX)
OUT=${OUT:-$WORK}
mkdir -p "$WORK/www" "$WORK/logs" "$OUT"
chmod 755 "$WORK" "$WORK/www"   # nginx workers run as an unprivileged user
head -c 1024 /dev/urandom > "$WORK/www/1k"
chmod 644 "$WORK/www/1k"
cat > "$WORK/nginx.conf" <<EOF
worker_processes 1;
daemon off;
error_log $WORK/logs/error.log;
pid $WORK/logs/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$PORT backlog=4096;
        root $WORK/www;
    }
}
EOF

taskset -c "$SERVER_CPU" nginx -c "$WORK/nginx.conf" -p "$WORK" &
NGINX_PID=$!
cleanup() { kill "$NGINX_PID" 2>/dev/null || true; wait "$NGINX_PID" 2>/dev/null || true; }
trap cleanup EXIT

URL="http://127.0.0.1:$PORT/1k"
echo "$URL" > "$WORK/urls"
for _ in $(seq 100); do
    curl -sf -o /dev/null "$URL" 2>/dev/null && break
    sleep 0.1
done
[[ $(curl -s "$URL" | wc -c) -eq 1024 ]] || { echo "vs-wrk.sh: nginx did not come up" >&2; exit 1; }

TIME=""
[[ -x /usr/bin/time ]] && TIME="/usr/bin/time -f %U+%S -o"

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

echo "round tool req/s client_cpu_us_per_req" > "$OUT/rounds.txt"
for r in $(seq "$ROUNDS"); do
    # wrk
    if [[ -n $TIME ]]; then $TIME "$WORK/wrk.time" taskset -c "$CLIENT_CPU" wrk -t1 -c$CONNS -d"${SECS}s" "$URL" > "$WORK/wrk.$r.txt"
    else taskset -c "$CLIENT_CPU" wrk -t1 -c$CONNS -d"${SECS}s" "$URL" > "$WORK/wrk.$r.txt"; fi
    wrk_rps=$(awk '/^Requests\/sec:/ {print $2}' "$WORK/wrk.$r.txt")
    wrk_n=$(awk '/requests in/ {print $1}' "$WORK/wrk.$r.txt")
    if grep -qE "Non-2xx|Socket errors" "$WORK/wrk.$r.txt"; then echo "wrk round $r had errors:" >&2; cat "$WORK/wrk.$r.txt" >&2; fi
    wrk_cpu=NA
    [[ -n $TIME ]] && wrk_cpu=$(awk -v n="$wrk_n" '{split($1,a,"+"); printf "%.2f", (a[1]+a[2])*1e6/n}' "$WORK/wrk.time")
    echo "$r wrk $wrk_rps $wrk_cpu" | tee -a "$OUT/rounds.txt"

    # spindle-load
    if [[ -n $TIME ]]; then $TIME "$WORK/sl.time" taskset -c "$CLIENT_CPU" "$SPINDLE_LOAD" --keepalive -parallel $CONNS -seconds "$SECS" --json "$OUT/spindle-load.$r.json" "$WORK/urls" > "$WORK/sl.$r.txt"
    else taskset -c "$CLIENT_CPU" "$SPINDLE_LOAD" --keepalive -parallel $CONNS -seconds "$SECS" --json "$OUT/spindle-load.$r.json" "$WORK/urls" > "$WORK/sl.$r.txt"; fi
    sl_rps=$(awk '/fetches\/sec/ {print $1}' "$WORK/sl.$r.txt")
    sl_n=$(awk 'NR==1 {print $1}' "$WORK/sl.$r.txt")
    if ! grep -q "^  code 200 -- $sl_n\$" "$WORK/sl.$r.txt"; then echo "spindle-load round $r had non-200s or errors:" >&2; cat "$WORK/sl.$r.txt" >&2; fi
    sl_cpu=NA
    [[ -n $TIME ]] && sl_cpu=$(awk -v n="$sl_n" '{split($1,a,"+"); printf "%.2f", (a[1]+a[2])*1e6/n}' "$WORK/sl.time")
    echo "$r spindle-load $sl_rps $sl_cpu" | tee -a "$OUT/rounds.txt"
done

wrk_med=$(awk '$2=="wrk" {print $3}' "$OUT/rounds.txt" | median)
sl_med=$(awk '$2=="spindle-load" {print $3}' "$OUT/rounds.txt" | median)
wrk_cpu_med=$(awk '$2=="wrk" {print $4}' "$OUT/rounds.txt" | median)
sl_cpu_med=$(awk '$2=="spindle-load" {print $4}' "$OUT/rounds.txt" | median)
ratio=$(awk -v a="$sl_med" -v b="$wrk_med" 'BEGIN {printf "%.3f", a/b}')

{
    echo "| client (pinned to cpu $CLIENT_CPU) | median req/s | client CPU µs/req (median) | rounds |"
    echo "|---|---:|---:|---|"
    echo "| wrk -t1 -c$CONNS | $wrk_med | $wrk_cpu_med | $(awk '$2=="wrk" {printf "%s ", $3}' "$OUT/rounds.txt")|"
    echo "| spindle-load --keepalive -parallel $CONNS | $sl_med | $sl_cpu_med | $(awk '$2=="spindle-load" {printf "%s ", $3}' "$OUT/rounds.txt")|"
    echo
    echo "spindle-load / wrk = $ratio ($ROUNDS interleaved rounds of $SECS s; nginx $(nginx -v 2>&1 | sed 's/.*\///') pinned to cpu $SERVER_CPU; $(nproc) cpus; load average $(cut -d' ' -f1-3 /proc/loadavg))"
} | tee "$OUT/summary.md"
