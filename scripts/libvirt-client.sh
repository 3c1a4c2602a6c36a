#!/bin/bash
# libvirt-client.sh: a private libvirt client library (libvirt0 from
# bookworm-backports, 11.3) for running the provider on Debian 12 without
# touching the system's libvirt packages or its daemon (docs/libvirt-client.md).
#
#   LD_LIBRARY_PATH=$(scripts/libvirt-client.sh) bin/libvirt ...
#
# Prints the directory holding libvirt.so.0 (and libvirt-qemu, -lxc, -admin)
# on stdout, nothing else; logs go to stderr. Idempotent: a complete cache is
# reused without touching apt. The provider is built as usual against the
# system's libvirt-dev (9.0): libvirt's ABI only grows, so the binary runs on
# the newer library, and the remote driver (qemu+tls, qemu+ssh, qemu+libssh,
# qemu+unix, qemu:///system) lives inside libvirt.so.0 itself: nothing is
# loaded from the system's libvirt module directories.
#
# What it fetches, with `apt-get download` (hashes checked against the
# signed Release files): libvirt0 and the packages of its Depends that
# bookworm cannot satisfy, i.e. the backports-only ones (libvirt-common
# (= same version): /etc/libvirt/libvirt.conf and data; the client reads the
# system's /etc/libvirt/libvirt.conf, not this copy). Everything else libvirt0
# 11.3 needs (glib, gnutls, libssh, json-c, libbsd, ...) is bookworm's own
# and already on a machine with libvirt0 9.0, except libjson-c5 and libbsd0,
# which the script installs from bookworm when missing.
#
# Env: LIBVIRT_CLIENT_VERSION  the libvirt0 version (default: the newest
#                              bookworm-backports offers, 11.3.x)
#      LIBVIRT_CLIENT_CACHE    cache root (default
#                              /var/cache/bigfleet-libvirt-client): the
#                              library is unpacked into <cache>/<version>/
#      LIBVIRT_CLIENT_OFFLINE=1  never run apt: use the newest complete cache
# Adds /etc/apt/sources.list.d/bookworm-backports.sources when no source
# names bookworm-backports (its packages get apt's default priority 100 for
# backports: nothing installs from it by itself). Needs root for that and
# for apt-get update; not for a cache already filled.
set -euo pipefail
export LC_ALL=C DEBIAN_FRONTEND=noninteractive
umask 022

cache=${LIBVIRT_CLIENT_CACHE:-/var/cache/bigfleet-libvirt-client}
libdir=usr/lib/x86_64-linux-gnu
log() { echo "libvirt-client: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# complete DIR: a finished unpack (the marker is written last).
complete() { [ -e "$1/.complete" ] && [ -e "$1/$libdir/libvirt.so.0" ]; }

if [ "${LIBVIRT_CLIENT_OFFLINE:-0}" = 1 ]; then
	d=$(find "$cache" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | sort -V | tail -1)
	[ -n "$d" ] && complete "$d" || die "no complete client under $cache (run without LIBVIRT_CLIENT_OFFLINE)"
	echo "$d/$libdir"
	exit 0
fi

# A version given and already unpacked: no apt at all.
if [ -n "${LIBVIRT_CLIENT_VERSION:-}" ] && complete "$cache/$LIBVIRT_CLIENT_VERSION"; then
	echo "$cache/$LIBVIRT_CLIENT_VERSION/$libdir"
	exit 0
fi

ensure_source() {
	if grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then return 0; fi
	[ "$(id -u)" = 0 ] || die "no bookworm-backports apt source, and adding one needs root"
	. /etc/os-release
	[ "${VERSION_CODENAME:-}" = bookworm ] || log "WARNING: this is ${PRETTY_NAME:-not Debian 12}; bookworm-backports' libvirt0 is built for Debian 12"
	log "adding /etc/apt/sources.list.d/bookworm-backports.sources"
	cat >/etc/apt/sources.list.d/bookworm-backports.sources <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
	apt-get update -qq >&2
}

# bpo_version PACKAGE: the newest version bookworm-backports has, or nothing.
bpo_version() {
	apt-cache madison "$1" 2>/dev/null | awk -F' *[|] *' '$3 ~ /bookworm-backports/ { print $2; exit }'
}

ensure_source
version=${LIBVIRT_CLIENT_VERSION:-$(bpo_version libvirt0)}
if [ -z "$version" ]; then
	[ "$(id -u)" = 0 ] && { log "apt-get update (no bookworm-backports libvirt0 in the lists)"; apt-get update -qq >&2; }
	version=${LIBVIRT_CLIENT_VERSION:-$(bpo_version libvirt0)}
fi
[ -n "$version" ] || die "bookworm-backports offers no libvirt0 (apt-get update?)"
dest=$cache/$version
if complete "$dest"; then
	echo "$dest/$libdir"
	exit 0
fi

# The packages to unpack: libvirt0 and every Depends that only the backports
# version satisfies. apt resolves libvirt0=$version against an empty dpkg
# status (what a bare Debian 12 would need), and the ones it takes from
# bookworm-backports are ours; the rest must be on the system already.
plan=$(apt-get install -s -qq --no-install-recommends -o Dir::State::status=/dev/null \
	"libvirt0=$version" 2>&1) || die "apt cannot resolve libvirt0=$version: $plan"
pkgs=() missing=()
while read -r name ver origin; do
	if [[ $origin == *backports* ]]; then
		pkgs+=("$name=$ver")
	elif ! dpkg-query -W -f='${db:Status-Status}' "$name" 2>/dev/null | grep -qx installed; then
		missing+=("$name")
	fi
done < <(awk '$1 == "Inst" { v = $3; sub(/^\(/, "", v); $1 = $3 = ""; print $2, v, $0 }' <<<"$plan")
if [ ${#missing[@]} -gt 0 ]; then
	# Bookworm's own libraries (json-c, libbsd for 11.3): installing them
	# changes nothing else on the machine.
	[ "$(id -u)" = 0 ] || die "libvirt0 $version needs these bookworm packages, not installed here: ${missing[*]} (apt-get install ${missing[*]})"
	log "installing bookworm's ${missing[*]} (libvirt0 $version links them)"
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
log "libvirt0 $version: unpacking ${pkgs[*]} into $dest"

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "${pkgs[@]}" >&2) ||
	die "apt-get download ${pkgs[*]} failed"
mkdir -p "$tmp/root"
for deb in "$tmp"/*.deb; do
	dpkg-deb -x "$deb" "$tmp/root"
	printf '%s\t%s\t%s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
		"$(sha256sum "$deb" | cut -d' ' -f1)" >>"$tmp/root/.packages"
done
[ -e "$tmp/root/$libdir/libvirt.so.0" ] || die "no $libdir/libvirt.so.0 in ${pkgs[*]}"
# Every library it links must resolve on this machine (with the private
# copy first, as the caller will run it).
unresolved=$(LD_LIBRARY_PATH="$tmp/root/$libdir" ldd "$tmp/root/$libdir/libvirt.so.0" | grep 'not found' || true)
[ -z "$unresolved" ] || die "libvirt.so.0 $version links libraries this machine lacks: $unresolved"
touch "$tmp/root/.complete"
rm -rf "$dest"
mv "$tmp/root" "$dest"
log "libvirt0 $version ready in $dest/$libdir"
echo "$dest/$libdir"
