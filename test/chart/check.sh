#!/bin/bash
# make chart-check: the Helm chart and the container image definition.
#
#   - helm lint --strict and helm template (default values and every file in
#     test/chart/testdata/values: ssh, libvirt TLS, socket, gRPC TLS, mTLS +
#     NetworkPolicy + ServiceMonitor, in-memory, existing claim, a 100k
#     fleet), through
#     Helm's Go packages (helm.sh/helm/v4), no helm binary needed;
#   - strict decoding of every rendered manifest into the Kubernetes types;
#   - the memory limit and GOMEMLIMIT computed from expectedMachines;
#   - the chart's flags against `bin/libvirt --help`;
#   - the Dockerfile against the chart and the binary's shared libraries.
#
# The provider binary is built here (cgo, libvirt-dev; see scripts/deps.sh)
# unless LIBVIRT_BIN names one. Extra arguments go to `go test`. Every test
# event is kept in out/gotest-chart-check.json, which make test's closing
# line counts (scripts/test-stages.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export GOFLAGS=${GOFLAGS:--buildvcs=false}

if [ -z "${LIBVIRT_BIN:-}" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	echo "chart-check: building bin/libvirt for its --help and shared libraries" >&2
	go build -o "$tmp/libvirt" ./cmd/libvirt
	export LIBVIRT_BIN="$tmp/libvirt"
fi
export CHART_REQUIRE_BINARY=1

mkdir -p out
json="$root/out/gotest-chart-check.json"
cd test/chart
go vet ./...
# gotestsum comes from the main module's tools/go.mod; the tests it runs
# are this module's.
go tool -modfile="$root/tools/go.mod" gotestsum --format pkgname-and-test-fails \
	--jsonfile "$json" -- -count=1 "$@" ./...
