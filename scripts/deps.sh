#!/bin/bash
# Build and test dependencies of the provider on Debian 12, installed only
# when missing: the cgo toolchain for libvirt's Go bindings and the command
# line tools the tests use. The libvirt daemon, QEMU and the test guest are
# scripts/libvirt-env.sh's job. `scripts/deps.sh browser` adds Chromium for
# the browser test; `scripts/deps.sh image` the image
# tools (runc, umoci, skopeo); `scripts/deps.sh node` makes sure of Node and npm alone.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

# Node: protoc-gen-es (make gen), tsc and esbuild (make web) and the polkit
# rule test (node --test) all run on Node 18, Debian 12's. protoc-gen-es
# declares ">=22" (npm ci warns EBADENGINE) but its output on 18 is
# byte-identical, which make gen-check proves on every run. Keep in step
# with "engines" in web/package.json.
node_min=18

# apt_install installs the Debian packages named, as root.
apt_install() {
	[ $# -gt 0 ] || return 0
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing $*; run as root or install them" >&2
		exit 1
	fi
	echo "deps: installing $*" >&2
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends "$@" >&2
}

# A Node (and npm) already on the PATH and new enough is used as it is,
# whoever installed it; only a missing one comes from Debian.
if [ "${1:-}" = node ]; then
	want=()
	command -v node >/dev/null || want+=(nodejs)
	command -v npm >/dev/null || want+=(npm)
	apt_install "${want[@]}"
	major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || true)
	if [ -z "$major" ] || [ "$major" -lt "$node_min" ]; then
		echo "deps: $(command -v node) is Node ${major:-of unknown version}; make gen, make web and the polkit test need Node $node_min or newer (Debian 12's nodejs is 18)" >&2
		exit 1
	fi
	echo "deps: node $(node --version) ($(command -v node)), npm $(npm --version)" >&2
	exit 0
fi

want=(libvirt-dev pkg-config gcc libc6-dev curl ca-certificates git make)
[ "${1:-}" = browser ] && want+=(chromium fonts-dejavu-core)
# make image / make test-image (scripts/image, test/image): an OCI runtime,
# umoci to unpack the layout into a bundle, skopeo to read both outputs
# back, and containers-common's default seccomp profile.
[ "${1:-}" = image ] && want+=(runc umoci skopeo golang-github-containers-common)
missing=()
for p in "${want[@]}"; do
	dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
done
apt_install "${missing[@]}"
command -v go >/dev/null || { echo "deps: Go 1.26 is required (go not on PATH)" >&2; exit 1; }
exit 0
