#!/bin/bash
# Builds the tiny BigFleet test guest: a Debian cloud kernel plus an initramfs
# with busybox, qemu-guest-agent and the test hooks under rootfs/.
#
# Usage: scripts/guest/build.sh        (prints KERNEL=... and INITRD=... lines)
# Env:   BIGFLEET_GUEST_CACHE  cache dir (default /var/cache/bigfleet-libvirt/guest)
#        BIGFLEET_GUEST_KERNEL_PKG  force a kernel package (default: newest
#                                   linux-image-6.1.*-cloud-amd64 apt knows)
#
# The result is cached under $CACHE/<key>/, where key hashes every input file
# in this directory (except smoke.sh and docs) and the busybox/qemu-ga package
# versions, so editing a hook or /init rebuilds it and nothing else does.
# Needs: busybox-static, qemu-guest-agent, cpio, gzip; installs what is
# missing (the lab builds the guest without libvirt-env.sh having run).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
"$here/../ensure-packages.sh" busybox-static qemu-guest-agent cpio gzip
cache=${BIGFLEET_GUEST_CACHE:-/var/cache/bigfleet-libvirt/guest}
log() { echo "guest-build: $*" >&2; }

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock -w 600 9 || { log "another build holds $cache/.lock"; exit 1; }

pkgver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo none; }

input_key() {
	{
		cd "$here"
		find . -type f ! -name smoke.sh ! -name '*.md' | LC_ALL=C sort | while read -r f; do
			# mode matters too (a hook that lost +x must rebuild)
			printf '%s %s\n' "$f" "$(stat -c %a "$f")"
			sha256sum <"$f"
		done
		echo "busybox-static=$(pkgver busybox-static)"
		echo "qemu-guest-agent=$(pkgver qemu-guest-agent)"
		echo "kernel-override=${BIGFLEET_GUEST_KERNEL_PKG:-}"
	} | sha256sum | cut -c1-16
}

key=$(input_key)
out="$cache/$key"
if [ -s "$out/vmlinuz" ] && [ -s "$out/initrd.img" ]; then
	log "cached ($key, $(cat "$out/kernel-package" 2>/dev/null))"
	echo "KERNEL=$out/vmlinuz"
	echo "INITRD=$out/initrd.img"
	exit 0
fi

# ---- kernel ---------------------------------------------------------------
pick_kernel() {
	if [ -n "${BIGFLEET_GUEST_KERNEL_PKG:-}" ]; then
		echo "$BIGFLEET_GUEST_KERNEL_PKG"
		return
	fi
	apt-cache search --names-only '^linux-image-6\.1\..*-cloud-amd64$' 2>/dev/null |
		cut -d' ' -f1 | sort -V | tail -n1
}
kpkg=$(pick_kernel)
if [ -z "$kpkg" ]; then
	log "no linux-image-6.1.*-cloud-amd64 known to apt; running apt-get update"
	apt-get update -qq >&2
	kpkg=$(pick_kernel)
fi
[ -n "$kpkg" ] || { log "cannot find a Debian cloud kernel package"; exit 1; }

kdir="$cache/kernel/$kpkg"
if [ ! -d "$kdir/boot" ]; then
	log "downloading $kpkg"
	mkdir -p "$cache/debs"
	dl=$(mktemp -d)
	chmod 755 "$dl"
	chown _apt "$dl" 2>/dev/null || true # apt downloads as the _apt sandbox user
	(cd "$dl" && apt-get download -q "$kpkg" >&2) || (cd "$dl" && apt-get update -qq >&2 && apt-get download -q "$kpkg" >&2)
	mv "$dl"/*.deb "$cache/debs/"
	rmdir "$dl" 2>/dev/null || rm -rf "$dl"
	rm -rf "$kdir.tmp"
	mkdir -p "$kdir.tmp"
	dpkg -x "$cache/debs/${kpkg}_"*.deb "$kdir.tmp"
	mv "$kdir.tmp" "$kdir"
fi
vmlinuz=$(ls "$kdir"/boot/vmlinuz-* | head -n1)
kver=${vmlinuz##*/vmlinuz-}
moddir="$kdir/lib/modules/$kver"
[ -d "$moddir" ] || moddir="$kdir/usr/lib/modules/$kver"
[ -d "$moddir" ] || { log "no modules dir for $kver in $kpkg"; exit 1; }

# ---- initramfs --------------------------------------------------------------
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cp -a "$here/rootfs/." "$root/"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,lib/modules,proc,sys,dev,run,tmp,root,etc,var,opt/bigfleet}
chmod 1777 "$root/tmp"
ln -sfn ../run "$root/var/run"

# busybox and its applet links (never overwrite our own files, e.g. /sbin/shutdown)
cp /bin/busybox "$root/bin/busybox"
/bin/busybox --list-full | while read -r app; do
	[ -e "$root/$app" ] || [ -L "$root/$app" ] || ln -s /bin/busybox "$root/$app"
done

# qemu-ga and the shared libraries it needs (copied at the paths ldd reports)
qga=$(command -v qemu-ga || echo /usr/sbin/qemu-ga)
[ -x "$qga" ] || { log "qemu-ga not found (install qemu-guest-agent)"; exit 1; }
cp "$qga" "$root/usr/sbin/qemu-ga"
ldd "$qga" | grep -o '/[^ ]*' | sort -u | while read -r lib; do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done

# virtio modules, flattened into /lib/modules/<name>.ko, in load order
: >"$root/etc/bigfleet-modules"
grep -v '^[[:space:]]*\(#\|$\)' "$here/modules" | while read -r m; do
	f=$(find "$moddir/kernel" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" | head -n1)
	if [ -z "$f" ]; then
		log "module $m not in $kpkg (built in?), skipping"
		continue
	fi
	case "$f" in
	*.xz) xz -dc "$f" >"$root/lib/modules/$m.ko" ;;
	*.zst) zstd -qdc "$f" >"$root/lib/modules/$m.ko" ;;
	*) cp "$f" "$root/lib/modules/$m.ko" ;;
	esac
	echo "$m" >>"$root/etc/bigfleet-modules"
done

echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"
echo bigfleet-guest >"$root/etc/hostname"
mknod -m 600 "$root/dev/console" c 5 1 2>/dev/null || true
mknod -m 666 "$root/dev/null" c 1 3 2>/dev/null || true

rm -rf "$out.tmp"
mkdir -p "$out.tmp"
(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -9 >"$out.tmp/initrd.img"
cp "$vmlinuz" "$out.tmp/vmlinuz"
echo "$kpkg" >"$out.tmp/kernel-package"
rm -rf "$out"
mv "$out.tmp" "$out"
# drop builds for older inputs (kernel debs stay cached)
for d in "$cache"/*/; do
	d=${d%/}
	case "${d##*/}" in "$key" | debs | kernel) ;; *) [ -s "$d/initrd.img" ] && rm -rf "$d" ;; esac
done
log "built $key: $kpkg, initrd $(du -h "$out/initrd.img" | cut -f1)"
echo "KERNEL=$out/vmlinuz"
echo "INITRD=$out/initrd.img"
