#!/bin/bash
# Builds (once, then cached) the root filesystem of a lab host:
#   scripts/lab/rootfs.sh SUITE     SUITE = bookworm (libvirt 9.0) | trixie (libvirt 11.3)
# prints the directory. A lab host runs its daemons chrooted into an overlay of
# it (scripts/lab.sh), so each host has its own /etc, /run and /var and the
# machine's own packages are never changed. The cache is keyed on the suite
# and the package list: change either and it is rebuilt.
set -euo pipefail
suite=${1:?usage: rootfs.sh bookworm|trixie}
CACHE=${BIGFLEET_LAB_CACHE:-/var/cache/bigfleet-lab}
MIRROR=${BIGFLEET_LAB_MIRROR:-http://deb.debian.org/debian}
# libvirt-daemon-system (with its sysv flavour: no systemd) is what an
# operator's host has: the libvirt users and groups, polkit's libvirt actions
# (org.libvirt.api.policy, which the polkit access driver needs).
PACKAGES=(libvirt-daemon libvirt-daemon-system libvirt-daemon-system-sysv
	libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 qemu-utils
	openssh-server polkitd dbus iproute2 procps ca-certificates)
# Debian 13 split the storage and network drivers out of libvirt-daemon.
[ "$suite" = trixie ] && PACKAGES+=(libvirt-daemon-driver-storage-disk)
log() { echo "lab-rootfs: $*" >&2; }

case "$suite" in bookworm | trixie) ;; *) log "unknown suite $suite"; exit 2 ;; esac
key=$(printf '%s\n' "$suite" "$MIRROR" "${PACKAGES[@]}" | sha256sum | cut -c1-12)
dir=$CACHE/rootfs-$suite
mkdir -p "$CACHE"
exec 9>"$CACHE/.rootfs-$suite.lock"
flock -w 900 9
if [ "$(cat "$dir/.bigfleet-lab-key" 2>/dev/null)" = "$key" ]; then echo "$dir"; exit 0; fi

command -v mmdebstrap >/dev/null || {
	log "installing mmdebstrap"
	apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends mmdebstrap >&2 ||
		{ apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
		  apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends mmdebstrap >&2; }
}
rm -rf "$dir.new"
t0=$SECONDS
log "building $suite root filesystem (${#PACKAGES[@]} packages)"
# The users the lab needs are made here, in the image, never on the machine.
mmdebstrap --quiet --variant=minbase --mode=root \
	--aptopt='Acquire::Retries "3"' \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
	--include="$(IFS=,; echo "${PACKAGES[*]}")" \
	--customize-hook='chroot "$1" sh -c "rm -f /etc/ssh/ssh_host_* /etc/libvirt/qemu/networks/autostart/*"' \
	"$suite" "$dir.new" "$MIRROR" >&2
echo "$key" >"$dir.new/.bigfleet-lab-key"
rm -rf "$dir"
mv "$dir.new" "$dir"
log "$suite built in $((SECONDS - t0)) s"
echo "$dir"
