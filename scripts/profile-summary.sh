#!/bin/bash
# profile-summary.sh TESTBINARY CPUPROFILE: where a read's CPU goes, by
# layer, as a share of all samples (docs/benchmarks.md, "Read path
# profile"). Each layer's samples exclude the layers listed above it, so
# the shares add up (the rest is the scheduler, timers and the harness).
set -euo pipefail
bin=$1 prof=$2
share() { # focus ignore
	go tool pprof -top -nodecount=1000000 -nodefraction=0 -edgefraction=0 -focus="$1" ${2:+-ignore="$2"} "$bin" "$prof" 2>/dev/null |
		sed -n 's/.*accounting for [^,]*, \([0-9.]*%\) of \(.*\) total/\1/p'
}
ours='server\.\(\*service\)\.|server\.\(\*engineAdapter\)'
icpt='server\.\(\*?(observer|recoverer)\)'
printf '%-58s %s\n' layer share
printf '%-58s %s\n' "provider handler + engine + cached bytes (server.service)" "$(share "$ours")"
printf '%-58s %s\n' "interceptors' own cost (observer, recoverer)" "$(share "$icpt" "$ours")"
printf '%-58s %s\n' "connect-go (envelopes, codecs, headers)" "$(share 'connectrpc\.com' "$ours|$icpt")"
printf '%-58s %s\n' "net/http HTTP/2 server (frames, streams, socket writes)" "$(share 'net/http\.' 'connectrpc\.com|google\.golang\.org/grpc')"
printf '%-58s %s\n' "grpc-go client (the benchmark's 64 callers)" "$(share 'google\.golang\.org/grpc')"
printf '%-58s %s\n' "garbage collector (background marking)" "$(share 'gcBgMarkWorker')"
