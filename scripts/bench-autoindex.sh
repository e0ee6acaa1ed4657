#!/usr/bin/env bash
# A 10,000-entry directory listing served hot, keep-alive: spindle --autoindex
# against nginx autoindex, one worker each (server on CPU 0, spindle-load on
# CPU 1), ROUNDS interleaved rounds of SECONDS, the order alternating.
# Prints req/s and server CPU s per 10k requests (utime+stime of the
# serving process), each round and the medians.
#
#   scripts/bench-autoindex.sh [ROUNDS] [SECONDS]    (after cargo build --release)
set -euo pipefail
rounds=${1:-3}
secs=${2:-10}
top=$(cd "$(dirname "$0")/.." && pwd)
spindle=$top/target/release/spindle
load=$top/target/release/spindle-load
w=$(mktemp -d /var/tmp/bench-autoindex-XXXX)
trap 'rm -rf "$w"' EXIT
chmod 755 "$w"    # nginx's workers run as www-data
mkdir -p "$w/root/d"
python3 - "$w/root/d" <<'EOF'
import sys
for i in range(10000):
    open("%s/file-%05d.dat" % (sys.argv[1], i), "w").write("x" * (i % 997))
EOF
cat > "$w/nginx.conf" <<EOF
worker_processes 1;
daemon off;
error_log $w/nginx.err;
pid $w/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  server {
    listen 127.0.0.1:18501;
    root $w/root;
    location / { autoindex on; }
  }
}
EOF

one() {
  local name=$1 port pid
  if [ "$name" = spindle ]; then
    taskset -c 0 "$spindle" --workers 1 --autoindex --listen 127.0.0.1:18500 "$w/root" 2>/dev/null &
    pid=$!
    port=18500
  else
    taskset -c 0 nginx -c "$w/nginx.conf" &
    port=18501
  fi
  sleep 0.7
  [ "$name" = nginx ] && pid=$(pgrep -f "nginx: worker" | head -1)
  echo "http://127.0.0.1:$port/d/" > "$w/urls"
  curl -s -o /dev/null "http://127.0.0.1:$port/d/"    # the listing is hot from here
  local t0 t1 out
  t0=$(awk '{print $14+$15}' "/proc/$pid/stat")
  out=$(taskset -c 1 "$load" -parallel 10 -seconds "$secs" --keepalive --no-progress "$w/urls" 2>&1)
  t1=$(awk '{print $14+$15}' "/proc/$pid/stat")
  if [ "$name" = nginx ]; then kill "$(cat "$w/nginx.pid")"; else kill "$pid"; fi
  wait 2>/dev/null || true
  # Every answer a 200 listing, or the round is void.
  if ! echo "$out" | grep -q "code 200" || echo "$out" | grep -q "code [^2]"; then
    echo "$name: not every answer was 200: $out" >&2
    exit 1
  fi
  local fetches rate
  fetches=$(echo "$out" | awk '/ fetches, /{print $1}')
  rate=$(echo "$out" | awk '/fetches\/sec/{print $1}')
  python3 -c "print('$name', $rate, ($t1-$t0)/100/$fetches*10000)"
}

for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="spindle nginx"; else order="nginx spindle"; fi
  for s in $order; do one "$s"; done
done | tee "$w/rows" | awk '{printf "%-8s %8.0f req/s %9.3f CPU s/10k\n", $1, $2, $3}'
python3 - "$w/rows" <<'EOF'
import sys, statistics, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    n, r, c = line.split()
    d[n].append((float(r), float(c)))
m = {n: (statistics.median(r for r, _ in v), statistics.median(c for _, c in v)) for n, v in d.items()}
for n, (r, c) in m.items():
    print("median %-8s %8.0f req/s %9.3f CPU s/10k" % (n, r, c))
s, g = m["spindle"], m["nginx"]
print("spindle / nginx: req/s %.1fx, CPU per request %.3fx" % (s[0] / g[0], s[1] / g[1]))
EOF
