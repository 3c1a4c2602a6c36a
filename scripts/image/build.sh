#!/bin/bash
# build.sh [OUT]: make image. The provider's container image, built with no
# container engine and no base image: the Debian 12 packages of
# scripts/image/packages.txt (libvirt0 11.3 from bookworm-backports)
# unpacked by rootfs.sh, the provider binary built here, packed by imgtool
# as an OCI layout (OUT/oci) and a docker-load tarball
# (OUT/libvirt-provider.tar), with the SBOM (OUT/sbom.spdx.json) and the
# package manifest (OUT/packages.tsv) beside them. OUT defaults to
# out/image. Every timestamp is SOURCE_DATE_EPOCH (default: the last
# commit's time), so two builds of one commit give the same digest.
#
# Env: IMAGE_BINARY (a provider binary built as below), IMAGE_REVISION (the
#      revision label, default HEAD), IMAGE_EXTRA_PACKAGES (e.g. genisoimage for --base-user-data), plus
#      rootfs.sh's IMAGE_DEB_CACHE, IMAGE_APT_STATE and IMAGE_APT_UPDATE.
#      The packages come from scripts/image/apt's sources and pins alone
#      (libvirt0 and libvirt-common from bookworm-backports), whatever this
#      machine's /etc/apt holds: the Dockerfile resolves with the same files.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
out=$(mkdir -p "${1:-out/image}" && cd "${1:-out/image}" && pwd)
export GOFLAGS=${GOFLAGS:--buildvcs=false}
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || true)}
[ -n "$epoch" ] || { echo "image: no SOURCE_DATE_EPOCH and no git history to take it from" >&2; exit 1; }
revision=${IMAGE_REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
work="$out/.work"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

t0=$(date +%s)
go build -C scripts/image -o "$work/imgtool" ./imgtool
ref=$("$work/imgtool" ref -chart helm/libvirt-provider)
echo "image: building $ref (SOURCE_DATE_EPOCH=$epoch)" >&2
# The binary as the Dockerfile's build stage builds it (IMAGE_BINARY: one
# built that way already).
if [ -n "${IMAGE_BINARY:-}" ]; then
	cp "$IMAGE_BINARY" "$work/libvirt"
else
	CGO_ENABLED=1 go build -trimpath -ldflags "-s -w" -o "$work/libvirt" ./cmd/libvirt
fi
# shellcheck disable=SC2086 # a list of package names
scripts/image/rootfs.sh "$work/rootfs" "$out/packages.tsv" ${IMAGE_EXTRA_PACKAGES:-}
"$work/imgtool" allow -manifest "$out/packages.tsv" -allowlist scripts/image/allowlist.txt
"$work/imgtool" pack -rootfs "$work/rootfs" -add "/usr/local/bin/libvirt=$work/libvirt" \
	-ref "$ref" -epoch "$epoch" -revision "$revision" -packages "$(wc -l <"$out/packages.tsv")" -out "$out"
"$work/imgtool" sbom -manifest "$out/packages.tsv" -image "$out/image.json" -epoch "$epoch" -out "$out/sbom.spdx.json"
echo "image: $out/oci ($ref), $out/libvirt-provider.tar, $out/sbom.spdx.json in $(($(date +%s) - t0))s" >&2
