#!/usr/bin/env bash
# rustls's crypto provider, measured: spindle built with aws-lc-rs (the
# default) against the same source built with ring (--no-default-features),
# HTTPS on hot files, ECDSA P-256 (the test suite's certificate), one worker
# on CPU 0, spindle-load on CPU 1 with 64 fetches in flight for SECONDS, the
# order alternating per round. Workloads: keep-alive 1 KiB and 100 KiB, and
# a new connection per fetch with a full TLS 1.3 handshake (--no-resume) and
# resumed. Prints req/s and server CPU µs per request per run, then medians
# and the aws-lc-rs/ring ratios.
#
#   scripts/bench-tls-provider.sh [ROUNDS] [SECONDS]
set -euo pipefail
rounds=${1:-6}
secs=${2:-8}
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
cargo build -q --release -p spindle -p spindle-load
cargo build -q --release -p spindle --no-default-features --target-dir target/ring
declare -A bin=([awslc]=$top/target/release/spindle [ring]=$top/target/ring/release/spindle)
load=$top/target/release/spindle-load
tls=$top/crates/spindle/tests/data/tls
w=$(mktemp -d /var/tmp/bench-tls-provider-XXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$w"' EXIT
head -c 1024 /dev/urandom > "$w/k1"
head -c 102400 /dev/urandom > "$w/k100"
port=18443
tck=$(getconf CLK_TCK)
for n in k1 k100; do echo "https://localhost:$port/$n" > "$w/$n.urls"; done

run() { # round variant workload
  local r=$1 v=$2 wl=$3 args file pid c0 c1
  case $wl in
    ka1) args="--keepalive"; file=k1 ;;
    ka100) args="--keepalive"; file=k100 ;;
    full) args="--no-resume"; file=k1 ;;
    resumed) args=""; file=k1 ;;
  esac
  taskset -c 0 "${bin[$v]}" --workers 1 --tls-listen 127.0.0.1:$port \
    --tls-cert "$tls/p256.pem" --tls-key "$tls/p256.key" "$w" 2>/dev/null &
  pid=$!
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  # Warm: the file into the page cache and the small-file cache.
  taskset -c 1 "$load" -p 4 -f 200 --cacert "$tls/ca.pem" --no-progress "$w/$file.urls" >/dev/null 2>&1
  c0=$(awk '{print $14+$15}' /proc/$pid/stat)
  taskset -c 1 "$load" -p 64 -seconds "$secs" $args --cacert "$tls/ca.pem" --no-progress \
    "$w/$file.urls" > "$w/out" 2>&1
  c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  kill $pid; wait $pid 2>/dev/null || true
  python3 - "$r" "$v" "$wl" "$c0" "$c1" "$tck" "$w/out" <<'P'
import re, sys
r, v, wl, c0, c1, tck, path = sys.argv[1:]
out = open(path).read()
m = re.search(r'(\d+) fetches, .*? in ([\d.]+) seconds', out)
ok = re.search(r'code 200 -- (\d+)', out)
n = int(m.group(1)) if m else 0
good = ok and int(ok.group(1)) == n and n > 0
cpu = (int(c1) - int(c0)) / int(tck)
print('r=%s %-6s %-8s %9.0f req/s  cpu %5.2f s  %6.1f us/req%s' % (
    r, v, wl, n / float(m.group(2)) if m else 0, cpu, cpu / max(n, 1) * 1e6, '' if good else '  BAD'))
P
}

for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="ring awslc"; else order="awslc ring"; fi
  for wl in ka1 ka100 full resumed; do
    for v in $order; do run "$r" "$v" "$wl"; done
  done
done | tee "$w/runs"

python3 - "$w/runs" <<'P'
import re, statistics, collections, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    m = re.match(r'r=\d+ (\S+)\s+(\S+)\s+(\d+) req/s\s+cpu\s+[\d.]+ s\s+([\d.]+) us/req', l)
    if m and 'BAD' not in l:
        d[(m.group(2), m.group(1))].append((int(m.group(3)), float(m.group(4))))
print('workload   ring req/s  us/req | aws-lc-rs req/s  us/req | ratio req/s  CPU/req')
for wl in ('ka1', 'ka100', 'full', 'resumed'):
    r, a = d[(wl, 'ring')], d[(wl, 'awslc')]
    if not r or not a:
        continue
    med = lambda x, i: statistics.median(t[i] for t in x)
    print('%-8s %12.0f %7.1f | %15.0f %7.1f | %10.3f %8.3f' % (
        wl, med(r, 0), med(r, 1), med(a, 0), med(a, 1), med(a, 0) / med(r, 0), med(a, 1) / med(r, 1)))
P
