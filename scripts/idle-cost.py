#!/usr/bin/env python3
"""What idle keep-alive connections cost one spindle server per request.

`spindle-bench idle` measures req/s at saturation, where the load generator's
core is as busy as the server's and req/s follows the machine's speed. This
script holds the request rate fixed below saturation instead, so that the
server's CPU per request at 0 and at N idle connections can be compared
directly: same rate, same batching, only the idle connections differ.

Each step starts a fresh server (one worker, pinned to CPU 0) and runs
`spindle-load -rate R --keepalive --idle N -seconds S` pinned to CPU 1 over
the 1 KiB set. The server's CPU (utime+stime of its process, all threads) is
read at each of the load generator's `-verbose --interval 1` lines, and
counted from the second line to the one before last, so that neither the
idle setup nor the close is in it. The load generator's own CPU per request
(from its JSON) is printed beside it as a yardstick for the machine's speed.
Steps alternate 0 and N, in the opposite order every other round.

Usage: scripts/idle-cost.py [--rounds 4] [--rate 60000] [--idle 10000]
          [--seconds 10] [--backend io-uring]
          [--data /var/tmp/spindle-bench-data/tiny] [--bin target/release]
Needs: a release build (cargo build --release), `spindle-bench mkfiles
--sets tiny`, taskset, 2+ CPUs, and an open-file limit above N + 200.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

PORT = 19071


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def step(a, idle, urls, out_json):
    server = subprocess.Popen(
        ["taskset", "-c", "0", f"{a.bin}/spindle", "--backend", a.backend,
         "--workers", "1", "--listen", f"127.0.0.1:{PORT}", a.data],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.7)
    try:
        load = subprocess.Popen(
            ["taskset", "-c", "1", f"{a.bin}/spindle-load", "-rate", str(a.rate),
             "--max-in-flight", "100", "-seconds", str(a.seconds), "--keepalive",
             "--idle", str(idle), "-verbose", "--interval", "1", "--json", out_json,
             urls],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        marks = []
        for line in load.stderr:
            m = re.match(r"--- ([\d.e+]+) secs, \d+ fetches started, (\d+) completed", line)
            if m:
                marks.append((float(m.group(1)), int(m.group(2)), cpu_seconds(server.pid)))
        if load.wait() != 0:
            sys.exit(f"idle-cost: spindle-load failed at {idle} idle connections")
    finally:
        server.terminate()
        server.wait()
    if len(marks) < 4:
        sys.exit("idle-cost: too few progress lines; use --seconds 4 or more")
    (t0, n0, c0), (t1, n1, c1) = marks[1], marks[-2]
    with open(out_json) as f:
        j = json.load(f)
    client = j["client_cpu"]["user_secs"] + j["client_cpu"]["system_secs"]
    return {
        "req_per_sec": (n1 - n0) / (t1 - t0),
        "server": (c1 - c0) / (n1 - n0) * 1e4,
        "client": client / j["fetches"] * 1e4,
        "held": j["idle"]["held_at_end"],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--rate", type=int, default=60000)
    p.add_argument("--idle", type=int, default=10000)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--backend", default="io-uring")
    p.add_argument("--data", default="/var/tmp/spindle-bench-data/tiny")
    p.add_argument("--bin", default="target/release")
    a = p.parse_args()
    files = sorted(f for f in os.listdir(a.data) if not f.startswith("."))
    if not files:
        sys.exit(f"idle-cost: no files in {a.data}")
    work = tempfile.mkdtemp(prefix="idle-cost-")
    urls = os.path.join(work, "urls")
    with open(urls, "w") as f:
        f.writelines(f"http://127.0.0.1:{PORT}/{name}\n" for name in files)
    res = {0: [], a.idle: []}
    for r in range(a.rounds):
        for n in ([0, a.idle] if r % 2 == 0 else [a.idle, 0]):
            s = step(a, n, urls, os.path.join(work, "load.json"))
            res[n].append(s)
            print(f"round {r + 1} idle {n:>6} (held {s['held']:>6}): {s['req_per_sec']:>8.0f} req/s  "
                  f"server {s['server']:.4f} s/10k  client {s['client']:.4f} s/10k", flush=True)
    med = {n: {k: statistics.median(x[k] for x in v) for k in ("server", "client")}
           for n, v in res.items()}
    print(f"medians: server {med[0]['server']:.4f} -> {med[a.idle]['server']:.4f} s/10k "
          f"({med[a.idle]['server'] / med[0]['server']:.2f}x), client {med[0]['client']:.4f} -> "
          f"{med[a.idle]['client']:.4f} s/10k ({med[a.idle]['client'] / med[0]['client']:.2f}x)")


if __name__ == "__main__":
    main()
