#!/usr/bin/env python3
"""perf-split.py PERF_DATA...: where a provider's user-space CPU goes, by
layer (issue 24; docs/benchmarks.md). Reads `perf script` of a recording
made by BenchmarkGetProfile and puts each sample in the first layer, in the
order below, that has a frame on its stack, so the shares add up."""
import re
import subprocess
import sys

LAYERS = [
    ("engine + cached bytes (lifecycle, store)", r"bigfleet/libvirt-provider/server/(lifecycle|store)\.|go\.etcd\.io/bbolt"),
    ("provider handler (server.service)", r"libvirt-provider/server\.\(\*service\)"),
    ("interceptors (observer: request id, log, metrics; recoverer)", r"libvirt-provider/server\.(\(\*?(observer|recoverer)\)|observer\.|\(\*Metrics\))"),
    ("bare handler (the ceiling's Get)", r"main\.bare\.Get"),
    ("connect-go (envelopes, codecs, headers)", r"connectrpc\.com/"),
    ("net/http HTTP/2 server: handler goroutine", r"net/http\.\(\*http2serverConn\)\.runHandler"),
    ("net/http HTTP/2 server: frame writer", r"net/http\.\(\*http2serverConn\)\.writeFrameAsync"),
    ("net/http HTTP/2 server: frame reader", r"net/http\.\(\*http2serverConn\)\.readFrames"),
    ("net/http HTTP/2 server: serve loop", r"net/http\."),
    ("garbage collector (background marking)", r"runtime\.gcBgMarkWorker"),
    ("GC assists", r"runtime\.gcAssistAlloc"),
    ("scheduler (findRunnable, park, sysmon)", r"runtime\.(mcall|schedule|findRunnable|sysmon|park_m|goexit0)"),
]


def samples(path):
    out = subprocess.run(["perf", "script", "-i", path, "-F", "ip,sym"],
                         capture_output=True, text=True, check=True).stdout
    for block in out.split("\n\n"):
        frames = [l.strip() for l in block.strip().splitlines() if l.strip()]
        if frames:
            yield frames


def main():
    for path in sys.argv[1:]:
        counts = {name: 0 for name, _ in LAYERS}
        counts["the rest"] = 0
        total = 0
        pats = [(n, re.compile(p)) for n, p in LAYERS]
        for frames in samples(path):
            total += 1
            stack = "\n".join(frames)
            for name, pat in pats:
                if pat.search(stack):
                    counts[name] += 1
                    break
            else:
                counts["the rest"] += 1
        print(f"== {path}: {total} user-space samples")
        for name, n in counts.items():
            if n:
                print(f"  {100*n/total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
