#!/usr/bin/env python3
"""Compressed bytes and CPU time per coding and level over the Python 3.11
documentation's HTML, CSS and JavaScript (python3.11-doc), file by file,
with the reference CLIs (gzip = zlib, brotli = Google's, zstd = libzstd).
CPU is the children's user+system time, less that of `cat` over the same
files (the cost of a process per file)."""
import os, resource, subprocess, sys
root = "/usr/share/doc/python3.11/html"
files = []
for d, _, fs in os.walk(root):
    for f in fs:
        if f.endswith((".html", ".css", ".js")):
            files.append(os.path.join(d, f))
files.sort()
total = sum(os.path.getsize(f) for f in files)
def run(argv_of):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = 0
    for f in files:
        p = subprocess.run(argv_of(f), stdout=subprocess.PIPE, check=True)
        out += len(p.stdout)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
_, base = run(lambda f: ["cat", f])
print(f"{len(files)} files, {total} bytes; process cost {base:.2f} s")
print("| coding | level | bytes | ratio | CPU s | MB/s |")
print("|---|---:|---:|---:|---:|---:|")
for coding, levels in [c for c in [("gzip", [1, 6, 9]), ("br", [5, 9, 11]), ("zstd", [3, 12, 19])] if c[0] in sys.argv[1:] or len(sys.argv) == 1]:
    for lv in levels:
        if coding == "gzip":
            argv = lambda f: ["gzip", "-c", f"-{lv}", f]
        elif coding == "br":
            argv = lambda f: ["brotli", "-c", "-q", str(lv), f]
        else:
            argv = lambda f: ["zstd", "-q", "-f", "-c", f"-{lv}", f]
        out, cpu = run(argv)
        cpu = max(cpu - base, 0.001)
        print(f"| {coding} | {lv} | {out:,} | {total/out:.2f} | {cpu:.2f} | {total/cpu/1e6:.1f} |", flush=True)
