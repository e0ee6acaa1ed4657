#!/usr/bin/env python3
"""Hot-path benchmark: spindle against nginx and lighttpd, everything cached.

One server worker pinned to CPU 0, `wrk -t1 -c100` pinned to CPU 1, random
URLs over 10,000 files of 100 KiB and over 1,000 files of 1 KiB. Servers
run interleaved in rounds, and each round starts one server later than
the last (A B C, B C A, C A B, ...) so that no server always runs first
after a change of set. The table reports medians (with min-max) of req/s
and of the server's own CPU seconds per 10,000 requests (utime+stime of
every thread of every server process, io-wq workers included, from
/proc/PID/stat), and how busy wrk kept its own core (its utime+stime over
the wall time of the run): near 100%, the client is what limits req/s.

Usage: scripts/bench-hot.py [--rounds 3] [--seconds 10] [--servers a,b,...]
          [--data /var/tmp/spindle-hot] [--out docs/results/hot-path.md]
Servers: spindle-<backend> for any backend (spindle-<backend>@<binary> to
compare builds), nginx, lighttpd.
Needs: wrk, nginx, lighttpd (apt-get install wrk nginx lighttpd), a
release build of spindle (cargo build --release), and 2+ CPUs.
"""
import argparse, os, re, resource, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETS = {"100k": (10_000, 100 * 1024), "1k": (1_000, 1024)}


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def make_files(data):
    for name, (count, size) in SETS.items():
        d = os.path.join(data, name)
        os.makedirs(d, exist_ok=True)
        marker = os.path.join(d, ".complete")
        if os.path.exists(marker):
            continue
        for i in range(count):
            with open(os.path.join(d, str(i)), "wb") as f:
                f.write(os.urandom(size))
        open(marker, "w").close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


def start(server, data, port, tmp):
    pin = ["taskset", "-c", "0"]
    if server.startswith("spindle-"):
        # spindle-BACKEND, or spindle-BACKEND@PATH to compare two builds.
        backend, _, binary = server[len("spindle-"):].partition("@")
        binary = binary or os.path.join(ROOT, "target", "release", "spindle")
        cmd = pin + [binary, "--backend", backend, "--workers", "1",
                     "--listen", f"127.0.0.1:{port}", data]
    elif server == "nginx":
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""worker_processes 1;
daemon off;
master_process on;
worker_rlimit_nofile 65536;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log;
events {{ worker_connections 4096; }}
http {{
  include /etc/nginx/mime.types;
  default_type application/octet-stream;
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  open_file_cache max=20000 inactive=60s;
  open_file_cache_valid 60s;
  server {{ listen 127.0.0.1:{port}; root {data}; }}
}}
""")
        cmd = pin + ["nginx", "-c", conf, "-p", tmp]
    elif server == "lighttpd":
        conf = os.path.join(tmp, "lighttpd.conf")
        with open(conf, "w") as f:
            f.write(f"""server.document-root = "{data}"
server.bind = "127.0.0.1"
server.port = {port}
server.errorlog = "{tmp}/lighttpd-error.log"
""")
        cmd = pin + ["lighttpd", "-D", "-f", conf]
    else:
        raise SystemExit(f"unknown server {server}")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    wait_port(port, proc)
    return proc


def pids_of(proc):
    pids = [proc.pid]
    try:
        pids += [int(p) for p in sh(["pgrep", "-g", str(proc.pid)]).split()]
    except subprocess.CalledProcessError:
        pass
    return sorted(set(pids))


def cpu_seconds(pids):
    tck = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in pids:
        try:
            stat = open(f"/proc/{p}/stat").read()
        except FileNotFoundError:
            continue
        f = stat[stat.rindex(")") + 2:].split()
        total += int(f[11]) + int(f[12])
    return total / tck


def run_wrk(port, set_name, seconds, lua):
    """Returns (requests, req/s, the share of its core wrk kept busy)."""
    count = SETS[set_name][0]
    env = dict(os.environ, NFILES=str(count), PREFIX=f"/{set_name}/")
    # taskset execs wrk, so wrk is the child whose usage this counts.
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out = sh(["taskset", "-c", "1", "wrk", "-t1", "-c100", f"-d{seconds}s", "-s", lua,
              f"http://127.0.0.1:{port}/"], env=env)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.monotonic() - t0
    busy = ((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)) / wall * 100
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock_err = re.search(r"Socket errors: (.*)", out)
    if errors or sock_err:
        print(f"    wrk reported: {errors.group(0) if errors else ''} {sock_err.group(0) if sock_err else ''}",
              file=sys.stderr)
    return reqs, rps, busy


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--servers", default="spindle-io-uring,nginx,lighttpd")
    ap.add_argument("--sets", default="100k,1k")
    ap.add_argument("--data", default="/var/tmp/spindle-hot")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    for tool in ["wrk", "taskset"]:
        if not shutil.which(tool):
            raise SystemExit(f"bench-hot: {tool} is not installed (apt-get install wrk util-linux)")
    servers = [s for s in a.servers.split(",") if s]
    make_files(a.data)
    lua = os.path.join(tempfile.mkdtemp(prefix="bench-hot-"), "random.lua")
    with open(lua, "w") as f:
        f.write('local n = tonumber(os.getenv("NFILES"))\nlocal prefix = os.getenv("PREFIX")\n'
                'math.randomseed(os.time())\n'
                'request = function() return wrk.format("GET", prefix .. math.random(0, n - 1)) end\n')
    # Warm the page cache.
    for set_name in a.sets.split(","):
        d = os.path.join(a.data, set_name)
        for n in os.listdir(d):
            with open(os.path.join(d, n), "rb") as fh:
                fh.read()
    results = {}
    for r in range(a.rounds):
        for set_name in a.sets.split(","):
            k = r % len(servers)
            for s in servers[k:] + servers[:k]:
                tmp = tempfile.mkdtemp(prefix="bench-hot-")
                port = free_port()
                proc = start(s, a.data, port, tmp)
                try:
                    run_wrk(port, set_name, 2, lua)  # warm-up (open-file caches, TCP)
                    pids = pids_of(proc)
                    c0 = cpu_seconds(pids)
                    reqs, rps, busy = run_wrk(port, set_name, a.seconds, lua)
                    c1 = cpu_seconds(pids)
                finally:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait()
                    shutil.rmtree(tmp, ignore_errors=True)
                cpu10k = (c1 - c0) / reqs * 10_000
                results.setdefault((set_name, s), []).append((rps, cpu10k, busy))
                print(f"round {r + 1} {set_name:>4} {s:<28} {rps:>10.0f} req/s  {cpu10k:.3f} CPU s/10k req"
                      f"  wrk {busy:.0f}%", file=sys.stderr)
    lines = ["| set | server | req/s median (min-max) | server CPU s / 10k req median (min-max) | req/s vs best peer | CPU vs best peer | wrk's core busy |",
             "|---|---|---|---|---|---|---|"]
    for set_name in a.sets.split(","):
        med = {}
        for s in servers:
            v = results[(set_name, s)]
            med[s] = (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
        peers = [s for s in servers if not s.startswith("spindle")]
        best_rps = max((med[p][0] for p in peers), default=None)
        best_cpu = min((med[p][1] for p in peers), default=None)
        for s in servers:
            v = results[(set_name, s)]
            rps = [x[0] for x in v]
            cpu = [x[1] for x in v]
            r1 = f"{med[s][0] / best_rps:.2f}x" if best_rps else "-"
            r2 = f"{med[s][1] / best_cpu:.2f}x" if best_cpu else "-"
            lines.append(f"| {set_name} | {s} | {med[s][0]:,.0f} ({min(rps):,.0f}-{max(rps):,.0f}) | "
                         f"{med[s][1]:.3f} ({min(cpu):.3f}-{max(cpu):.3f}) | {r1} | {r2} | "
                         f"{statistics.median(x[2] for x in v):.0f}% |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
