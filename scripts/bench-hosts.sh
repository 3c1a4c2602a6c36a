#!/usr/bin/env bash
# make bench-hosts (issue 21): the provider binary against 200 libvirt
# hosts, 25% of them partitioned (tools/benchhosts). Healthy hosts are
# libvirt test-driver nodes; the partitioned ones are entries on one lab
# host (docs/lab.md) cut off with `scripts/lab.sh fault lab3 partition`.
# Brings the lab up (4 hosts) when it is down and leaves it as it finds it
# otherwise; a lab it brought up stays up (make lab-down takes it down).
# The lab host is healed whatever happens. Arguments go to the harness
# (e.g. -runs none,after -healthy 15 -partitioned 5); BENCH_BINARY picks
# another provider build (default bin/libvirt); BENCH_HOSTS_LIBVIRT_CLIENT=1
# runs it on the image's libvirt client 11.3 (scripts/libvirt-client.sh)
# instead of the system's. Results: a table on stdout,
# out/bench-hosts/ (results.json, the provider logs); figures in
# docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PART_HOST=${BENCH_HOSTS_PARTITION:-lab3}
OUT=out/bench-hosts

if ! scripts/lab.sh status >/dev/null 2>&1 || scripts/lab.sh status 2>&1 | grep -q '^lab is down'; then
	echo "bench-hosts: the lab is down: scripts/lab.sh up 4 (left up afterwards)" >&2
	scripts/lab.sh up 4 >/dev/null
fi
# shellcheck disable=SC1091
. /run/bigfleet-lab/env
trap 'scripts/lab.sh heal "$PART_HOST" >/dev/null || true' EXIT

client="$(dpkg-query -W -f='${Version}' libvirt0 2>/dev/null || echo '?') (system)"
if [ -n "${BENCH_HOSTS_LIBVIRT_CLIENT:-}" ]; then
	LD_LIBRARY_PATH=$(scripts/libvirt-client.sh)
	export LD_LIBRARY_PATH
	client="private copy in $LD_LIBRARY_PATH"
fi

mkdir -p "$OUT"
(cd tools/benchhosts && "$GO" build -o "../../$OUT/benchhosts" .)
rev=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
[ -z "$(git status --porcelain -- '*.go' ':!tools/' ':!*_test.go' 2>/dev/null)" ] || rev="$rev + uncommitted changes"
echo "bench-hosts: provider ${BENCH_BINARY:-bin/libvirt (working tree at $rev)}; machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(. /etc/os-release && echo "$PRETTY_NAME"), libvirt client $client" >&2
start=$(date +%s)
"$OUT/benchhosts" -binary "${BENCH_BINARY:-bin/libvirt}" -out "$OUT" -partition-host "$PART_HOST" "$@"
echo "bench-hosts: took $(( $(date +%s) - start )) s" >&2
