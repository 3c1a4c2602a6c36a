#!/bin/bash
# rootfs.sh ROOT MANIFEST [EXTRA_PACKAGE...]: the runtime image's root
# filesystem, from Debian 12 packages, with no shell, no package manager and
# no apt or dpkg state. `make image` runs it on the host and the
# Dockerfile's rootfs stage runs it in debian:12, on the same package list
# (scripts/image/packages.txt), so both images hold the same files.
#
# The packages are resolved by apt against an empty dpkg status (only what
# the listed packages need, nothing the build machine happens to have) and
# against the sources and pins of scripts/image/apt alone (Debian 12 and
# bookworm-backports, libvirt0 and libvirt-common pinned to backports),
# through a private apt configuration: the build machine's /etc/apt sources
# and preferences are not read, its apt lists and caches not touched. They
# are fetched with `apt-get download` (hashes checked against the signed
# Release files) into a cache, and unpacked with dpkg-deb into a merged-/usr
# tree, as mmdebstrap's extract variant does. No maintainer script runs:
# what the image needs from them (the CA bundle, passwd and group) is
# written here. MANIFEST gets one line per package, tab-separated: name,
# version, architecture, sha256 of the .deb, kind (deps, data or extra),
# source package. The provider binary is not added here: make image and the
# Dockerfile each put it at /usr/local/bin/libvirt.
#
# Env: IMAGE_DEB_CACHE (.deb cache, default /var/cache/bigfleet-image/debs),
#      IMAGE_APT_STATE (the private apt lists and caches, default
#      /var/cache/bigfleet-image/apt),
#      IMAGE_APT_UPDATE (auto: when the lists are missing, a day old or of
#      other sources; always; never).
set -euo pipefail
export LC_ALL=C DEBIAN_FRONTEND=noninteractive
umask 022

[ $# -ge 2 ] || { echo "usage: $0 ROOT MANIFEST [EXTRA_PACKAGE...]" >&2; exit 2; }
root=$1 manifest=$2
shift 2
extras=("$@")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${IMAGE_DEB_CACHE:-/var/cache/bigfleet-image/debs}
state=${IMAGE_APT_STATE:-/var/cache/bigfleet-image/apt}
log() { echo "rootfs: $*" >&2; }

# The private apt configuration: scripts/image/apt's sources and
# preferences only (the Dockerfile copies that directory beside this
# script), lists and package caches under $state, an empty dpkg status.
# apt.conf settings of the machine (a proxy, say) still apply.
[ -d "$here/apt/sources" ] && [ -d "$here/apt/preferences" ] ||
	{ log "$here/apt/sources and $here/apt/preferences missing"; exit 1; }
mkdir -p "$state/lists/partial" "$state/cache/archives/partial"
apt_opts=(
	-o Dir::Etc::sourcelist=/dev/null
	-o Dir::Etc::sourceparts="$here/apt/sources"
	-o Dir::Etc::preferences=/dev/null
	-o Dir::Etc::preferencesparts="$here/apt/preferences"
	-o Dir::State::lists="$state/lists"
	-o Dir::State::extended_states="$state/extended_states"
	-o Dir::State::status=/dev/null
	-o Dir::Cache="$state/cache"
)

deps_roots=() data_roots=()
while read -r name kind _; do
	case "$name" in '' | '#'*) continue ;; esac
	case "$kind" in
	deps) deps_roots+=("$name") ;;
	data) data_roots+=("$name") ;;
	*) log "packages.txt: $name: kind '$kind', want deps or data"; exit 1 ;;
	esac
done <"$here/packages.txt"

apt_update() {
	local mode=${IMAGE_APT_UPDATE:-auto} sources fresh=
	# $state/updated: the sources of the last apt-get update that succeeded
	# (edited sources need new lists at once).
	sources=$(cat "$here"/apt/sources/* | sha256sum | cut -d' ' -f1)
	if [ -n "$(find "$state/updated" -mmin -1440 2>/dev/null)" ] && [ "$(cat "$state/updated")" = "$sources" ]; then
		fresh=1
	fi
	if [ "$mode" = always ] || { [ "$mode" = auto ] && [ -z "$fresh" ]; }; then
		log "apt-get update ($state/lists)"
		rm -f "$state/updated"
		apt-get "${apt_opts[@]}" update -qq >&2
		echo "$sources" >"$state/updated"
	fi
}

# resolve PACKAGE...: "name version arch" of the closure apt would install
# on a machine with nothing installed (Depends and Pre-Depends only).
resolve() {
	apt-get "${apt_opts[@]}" install -s -qq --no-install-recommends "$@" |
		awk '$1 == "Inst" && match($0, /\[[a-z0-9]+\]\)/) { v = $3; sub(/^\(/, "", v); print $2, v, substr($0, RSTART + 1, RLENGTH - 3) }'
}

# candidate PACKAGE: "name version arch" of the package alone.
candidate() {
	apt-cache "${apt_opts[@]}" show --no-all-versions "$1" |
		awk -v n="$1" '/^Version:/ { v = $2 } /^Architecture:/ { a = $2 } /^$/ { exit } END { print n, v, a }'
}

apt_update
list=$(mktemp)
trap 'rm -f "$list"' EXIT
{
	resolve "${deps_roots[@]}" | sed 's/$/ deps/'
	for p in "${data_roots[@]}"; do candidate "$p" | sed 's/$/ data/'; done
	if [ ${#extras[@]} -gt 0 ]; then
		# Packages only the extras need are marked so the allow-list check
		# can tell them from the default image's.
		comm -13 <(resolve "${deps_roots[@]}" | sort) <(resolve "${deps_roots[@]}" "${extras[@]}" | sort) |
			sed 's/$/ extra/'
	fi
} | sort -u -k1,1 >"$list"
[ -s "$list" ] || { log "apt resolved nothing: did apt-get update of $here/apt/sources fail?"; exit 1; }

mkdir -p "$cache"
deb_of() { echo "$cache/${1}_${2//:/%3a}_${3}.deb"; }
missing=()
while read -r name ver arch _; do
	[ -s "$(deb_of "$name" "$ver" "$arch")" ] || missing+=("$name=$ver")
done <"$list"
if [ ${#missing[@]} -gt 0 ]; then
	log "downloading ${#missing[@]} packages into $cache"
	(cd "$cache" && apt-get "${apt_opts[@]}" download -qq -o APT::Sandbox::User=root "${missing[@]}" >&2)
fi

rm -rf "$root"
mkdir -p "$root/usr/bin" "$root/usr/sbin" "$root/usr/lib" "$root/usr/lib64"
# Debian 12's merged /usr, as debootstrap lays it before unpacking.
for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done
: >"$manifest"
while read -r name ver arch kind; do
	deb=$(deb_of "$name" "$ver" "$arch")
	[ -s "$deb" ] || { log "$deb missing after apt-get download"; exit 1; }
	dpkg-deb --fsys-tarfile "$deb" | tar -C "$root" --keep-directory-symlink -xf -
	sha=$(sha256sum "$deb" | cut -d' ' -f1)
	src=$(dpkg-deb -f "$deb" Source | cut -d' ' -f1)
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$ver" "$arch" "$sha" "$kind" "${src:-$name}" >>"$manifest"
done <"$list"

# Documentation, manuals and packaging metadata: keep only the copyright
# files (the licences the image ships under).
find "$root/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete 2>/dev/null || true
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf "$root"/usr/share/{man,info,lintian,doc-base,bug,menu}
# Packaging state, and scripts that need a shell: base-files' empty dpkg
# database directory and vendor file, update-ca-certificates (replaced
# below) and the motd script.
rm -rf "$root"/var/lib/dpkg "$root"/etc/dpkg "$root"/usr/sbin/update-ca-certificates \
	"$root"/etc/ca-certificates/update.d "$root"/etc/update-motd.d
# GLib's helpers run from dpkg triggers, never by a GLib client.
rm -f "$root"/usr/lib/x86_64-linux-gnu/glib-2.0/{glib-compile-schemas,gio-querymodules,gio-launch-desktop}

# What update-ca-certificates would write: every certificate, in order.
mkdir -p "$root/etc/ssl/certs"
find "$root/usr/share/ca-certificates" -name '*.crt' | sort |
	while read -r crt; do awk 1 "$crt"; done >"$root/etc/ssl/certs/ca-certificates.crt"

# The image's users: root owns the files, the provider runs as 65532.
# HOME is /tmp, the chart's writable emptyDir; nologin does not exist,
# there is no shell to log in to.
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/sbin/nologin
nonroot:x:65532:65532:nonroot:/tmp:/usr/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
nonroot:x:65532:
EOF
cat >"$root/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
hosts: files dns
EOF
mkdir -p "$root/tmp" "$root/root" "$root/usr/local/bin"
chmod 1777 "$root/tmp"
chmod 0700 "$root/root"

# Nothing that runs a command line may be left behind.
for bad in sh bash dash ash rbash busybox mawk gawk perl python3 dpkg apt apt-get; do
	if find "$root" -name "$bad" \( -type f -o -type l \) | grep -q .; then
		log "the tree has $bad: a package brought it in"
		exit 1
	fi
done
for state in var/lib/dpkg etc/dpkg var/lib/apt var/cache/apt etc/apt; do
	if [ -e "$root/$state" ]; then log "the tree has $state"; exit 1; fi
done
log "$(wc -l <"$manifest") packages unpacked into $root"
