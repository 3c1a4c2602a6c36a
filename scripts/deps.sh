#!/bin/bash
# Build and test dependencies of the provider on Debian 12, installed only
# when missing: the cgo toolchain for libvirt's Go bindings and the command
# line tools the tests use. The libvirt daemon, QEMU and the test guest are
# scripts/libvirt-env.sh's job; Chromium for the browser test is asked for
# with `scripts/deps.sh browser`.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

want=(libvirt-dev pkg-config gcc libc6-dev curl ca-certificates git make)
[ "${1:-}" = browser ] && want+=(chromium fonts-dejavu-core)

missing=()
for p in "${want[@]}"; do
	dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing ${missing[*]}; run as root or install them" >&2
		exit 1
	fi
	echo "deps: installing ${missing[*]}" >&2
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
command -v go >/dev/null || { echo "deps: Go 1.26 is required (go not on PATH)" >&2; exit 1; }
command -v node >/dev/null || echo "deps: node not found; the polkit rule test will be skipped" >&2
exit 0
