#!/bin/bash
# Builds the BigFleet golden image: a Debian (12 "bookworm" or 13 "trixie")
# systemd guest as a GPT qcow2 that boots under BIOS (grub-pc) and UEFI with
# Secure Boot (Debian's signed shim + grub + cloud kernel), with qemu-ga
# limited to the provider's RPCs, cloud-init (NoCloud), containerd, growpart
# and the bigfleet hooks (rootfs/opt/bigfleet). docs/golden-image.md.
#
# Usage: scripts/golden/build.sh [debian12|debian13]   (prints IMAGE=... line)
# Env:   BIGFLEET_GOLDEN_CACHE   cache dir (default /var/cache/bigfleet-libvirt/golden)
#        BIGFLEET_GOLDEN_MIRROR  Debian mirror (default: the host's deb.debian.org entry)
#        BIGFLEET_GOLDEN_SIZE    virtual disk size (default 3G)
#
# Cached under $CACHE/<key>/ where key hashes the recipe (this directory but its helpers),
# the release, the mirror and the suite's InRelease (the mirror snapshot: it
# changes at a Debian point release), so a rebuild happens only when the
# recipe or the archive changed. SOURCE_DATE_EPOCH is the InRelease date and
# the disk/filesystem UUIDs derive from the key: two builds with one key give
# the same qcow2, bit for bit. Needs root (chroot, bind mounts); no loop
# devices (mkfs.ext4 -d, mtools).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
golden=${1:-${GOLDEN:-debian12}}
cache=${BIGFLEET_GOLDEN_CACHE:-/var/cache/bigfleet-libvirt/golden}
size=${BIGFLEET_GOLDEN_SIZE:-3G}
log() { echo "golden-build: $*" >&2; }
die() { log "$*"; exit 1; }
# used_inodes FS: the numbers of the ext4 inodes in use (the root directory
# and 11 onwards; 1 and 3-10 are reserved), from dumpe2fs's free ranges.
used_inodes() {
	dumpe2fs "$1" 2>/dev/null | awk '
	/^Inodes per group:/ { ipg = $4 }
	/^Group [0-9]+:/ { g = $2 + 0 }
	/^  Free inodes:/ {
		delete free
		sub(/^  Free inodes: */, "")
		n = split($0, r, /, */)
		for (k = 1; k <= n; k++) {
			if (r[k] == "") continue
			m = split(r[k], ab, "-")
			for (i = ab[1]; i <= (m > 1 ? ab[2] : ab[1]); i++) free[i] = 1
		}
		for (i = g * ipg + 1; i <= (g + 1) * ipg; i++)
			if (!(i in free) && (i == 2 || i >= 11)) print i
	}'
}

case "$golden" in
debian12) suite=bookworm ;;
debian13) suite=trixie ;;
*) die "unknown GOLDEN=$golden (debian12 or debian13)" ;;
esac
[ "$(id -u)" = 0 ] || die "needs root (chroot, bind mounts)"

mirror=${BIGFLEET_GOLDEN_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(grep -rhoE 'https?://[^ ]*debian\.org/debian/?' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | grep -v security | head -n1 || true)
	mirror=${mirror:-http://deb.debian.org/debian}
fi
mirror=${mirror%/}

"$here/../ensure-packages.sh" mmdebstrap gdisk dosfstools mtools e2fsprogs qemu-utils util-linux curl

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock -w 1800 9 || die "another build holds $cache/.lock"

# ---- cache key ----------------------------------------------------------------
inrelease=$(curl -fsS --max-time 30 "$mirror/dists/$suite/InRelease" || true)
if [ -n "$inrelease" ]; then
	snapshot=$(printf '%s' "$inrelease" | sha256sum | cut -c1-16)
	SOURCE_DATE_EPOCH=$(date -d "$(printf '%s\n' "$inrelease" | sed -n 's/^Date: //p' | head -n1)" +%s)
else
	# Mirror unreachable: the newest cached build of this release is all we have.
	last=$(ls -t "$cache"/*/"$golden.qcow2" 2>/dev/null | head -n1 || true)
	[ -n "$last" ] || die "cannot reach $mirror/dists/$suite/InRelease and no cached $golden image"
	log "mirror unreachable; using cached $last"
	echo "IMAGE=$last"
	exit 0
fi
key=$({
	cd "$here"
	# the recipe: every file here but the docs and the two helpers that use
	# an image (pool-volume.sh, boot-times.sh) without shaping it
	find . -type f ! -name '*.md' ! -name pool-volume.sh ! -name boot-times.sh | LC_ALL=C sort | while read -r f; do
		printf '%s %s ' "$f" "$(stat -c %a "$f")"
		sha256sum <"$f"
	done
	echo "golden=$golden suite=$suite mirror=$mirror snapshot=$snapshot size=$size"
} | sha256sum | cut -c1-16)
out="$cache/$key"
img="$out/$golden.qcow2"
if [ -s "$img" ] && [ -s "$img.sha256" ]; then
	log "cached ($key, $golden from $suite snapshot $snapshot)"
	echo "IMAGE=$img"
	exit 0
fi
export SOURCE_DATE_EPOCH
start=$(date +%s)
log "building $golden ($suite from $mirror, snapshot $snapshot, SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH) -> $key"

# Fixed ids from the key: the same recipe gives the same disk and fs ids.
uuid_of() { printf '%s' "$key-$1" | sha256sum | sed -E 's/^(.{8})(.{4})(.{3})(.{3})(.{12}).*/\1-\2-4\3-a\4-\5/'; }
root_uuid=$(uuid_of root)
esp_id=$(printf '%s' "$key-esp" | sha256sum | cut -c1-8)

work=$(mktemp -d /var/tmp/bigfleet-golden.XXXXXX)
cleanup() {
	set +e
	for m in dev proc sys; do
		mountpoint -q "$work/tree/$m" 2>/dev/null && umount -R -l "$work/tree/$m"
	done
	rm -rf --one-file-system "$work"
}
trap cleanup EXIT

# ---- root filesystem tree (mmdebstrap, with a package cache) ---------------
mapfile -t pkgs < <(grep -v '^[[:space:]]*\(#\|$\)' "$here/packages")
debs="$cache/debs/$suite"
mkdir -p "$debs"
mmdebstrap --mode=root --variant=minbase --format=directory --skip=essential/unlink \
	--include="$(IFS=,; echo "${pkgs[*]}")" \
	--aptopt='APT::Install-Recommends "false"' \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
	--setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
	--setup-hook="sync-in $debs /var/cache/apt/archives/" \
	--customize-hook="sync-out /var/cache/apt/archives $debs" \
	--customize-hook='rm -f "$1"/var/cache/apt/archives/*.deb' \
	"$suite" "$work/tree" "deb $mirror $suite main" >&2

# ---- our files and configuration (in the tree) ---------------------------------
# No loop partitions, no mounts: the tree is configured in a chroot, the root
# filesystem made with mkfs.ext4 -d, the ESP with mtools, the BIOS boot code
# written at fixed sectors. So the build needs no partition scanning (absent
# in many containers) and no udev.
t="$work/tree"
cp -a "$here/rootfs/." "$t/"
chown -R 0:0 "$t/opt/bigfleet" "$t/etc/bigfleet" "$t/usr/lib/bigfleet"
chmod 0755 "$t/opt/bigfleet"
# The ESP by its vfat serial, which blkid and udev's /dev/disk/by-uuid/ spell
# in upper case: systemd matches the name exactly, and a lower-case one
# (sha256sum's) named a device that never appeared, so every boot waited
# 90 s for it (the job timeout) before systemd called the boot finished.
# Mounted on first use (x-systemd.automount), so no boot job waits for udev
# to announce the partition (10-15 s into the boot under TCG); nofail: an
# image whose ESP is gone still boots (BIOS needs none).
esp_uuid=$(printf '%s-%s' "${esp_id:0:4}" "${esp_id:4:4}" | tr a-f A-F)
cat >"$t/etc/fstab" <<FSTAB
UUID=$root_uuid / ext4 errors=remount-ro 0 1
UUID=$esp_uuid /boot/efi vfat umask=0077,nofail,x-systemd.automount 0 1
FSTAB
mkdir -p "$t/boot/efi"
echo bigfleet-node >"$t/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 bigfleet-node\n' >"$t/etc/hosts"
: >"$t/etc/machine-id" # generated on first boot: every clone its own
rm -f "$t/var/lib/dbus/machine-id"

for m in dev proc sys; do mount --rbind "/$m" "$t/$m"; done
umounts() { for m in dev proc sys; do mountpoint -q "$t/$m" && umount -R -l "$t/$m"; done; return 0; }
in_root() { chroot "$t" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" "$@"; }

# qemu-ga: only the provider's RPCs (backend/guestagent) plus read-only
# diagnostics. qemu-ga >= 8 has an allow-list; older ones get every other
# command blocked by name.
allow=guest-ping,guest-sync,guest-sync-delimited,guest-info,guest-file-open,guest-file-write,guest-file-read,guest-file-close,guest-exec,guest-exec-status,guest-network-get-interfaces
all=$(in_root qemu-ga --block-rpcs=help 2>&1 || in_root qemu-ga --blacklist=help 2>&1 || true)
all=$(printf '%s\n' "$all" | grep -oE '^guest-[a-z0-9-]+' | sort -u)
for r in ${allow//,/ }; do
	printf '%s\n' "$all" | grep -qx "$r" || { umounts; die "qemu-ga in $suite lacks $r (it knows: $(echo $all))"; }
done
if in_root qemu-ga --help 2>&1 | grep -q -- 'allow-rpcs'; then
	echo "allow-rpcs=$allow" >>"$t/etc/qemu/qemu-ga.conf"
else
	block=$(printf '%s\n' "$all" | grep -vxF -f <(tr , '\n' <<<"$allow") | paste -sd, -)
	echo "block-rpcs=$block" >>"$t/etc/qemu/qemu-ga.conf"
fi
# Enabled as a unit (Debian's has no [Install]; udev also pulls it in when
# the port appears).
mkdir -p "$t/etc/systemd/system/multi-user.target.wants"
ln -sfn /lib/systemd/system/qemu-guest-agent.service "$t/etc/systemd/system/multi-user.target.wants/qemu-guest-agent.service"
in_root systemctl enable systemd-networkd.service containerd.service bigfleet-growroot.service >&2
# A fast boot (docs/golden-image.md, "Boot time"): nothing waits for a
# network (a NIC without DHCP held network-online.target, and cloud-init
# behind it, for its whole timeout; a join step that needs the network waits
# itself), and no graphical.target. cloud-init runs no config stage (the
# modules of it a node needs run in the final stage): before cloud-init 24.3
# each stage is a Python process of its own (18 s under TCG for the config
# stage), so that unit is masked; from 24.3 (Debian 13) one process
# (cloud-init-main.service) runs all stages, each stage's unit signalling it,
# and masking one would stall the others: there the stage stays, empty.
in_root systemctl mask systemd-networkd-wait-online.service >&2
[ -e "$t/lib/systemd/system/cloud-init-main.service" ] || in_root systemctl mask cloud-config.service >&2
in_root systemctl set-default multi-user.target >&2
in_root systemctl mask apt-daily.timer apt-daily-upgrade.timer >&2 2>/dev/null || true
# Units a node never needs, each a process (or several) in a boot whose one
# vCPU is the limit under TCG: ext4 scrubbing of LVM snapshots (there is no
# LVM), dpkg's daily database backup, binfmt_misc, systemd-repart (the root
# is grown by bigfleet-growroot; its Wants= alone loaded loop and dm_mod),
# the DRM module for logind (no display), and a getty on the VGA console
# (the serial console's stays, on ttyS0).
in_root systemctl mask e2scrub_reap.service e2scrub_all.timer dpkg-db-backup.timer \
	systemd-binfmt.service proc-sys-fs-binfmt_misc.automount systemd-repart.service \
	modprobe@drm.service getty@tty1.service >&2
# Debian 13 (systemd 257, grub 2.12) adds more of them to every boot, each a
# process started in sysinit on the same vCPU (5-6 s each in `blame` under
# TCG): modprobe of configfs, fuse and efi_pstore (the first two load on
# first use anyway; a node keeps no crash dumps in EFI variables), and
# grub-common.service, which records a successful boot for grub's
# recordfail menu, a menu this image never shows (timeout 0).
for u in modprobe@configfs.service modprobe@fuse.service modprobe@efi_pstore.service grub-common.service; do
	in_root systemctl mask "$u" >&2
done
# systemd-resolved and systemd-timesyncd are ordered before sysinit.target
# (resolved also before network.target), so every ordinary unit (dbus,
# logind, containerd: After=basic.target and network.target) waited for
# their sandboxed start-up, 3.5-6 s each under TCG, on the critical chain.
# A node resolves names only when it joins (nss-lookup.target still waits
# for resolved) and its clock comes from the host's RTC: both still start in
# the boot transaction (so the boot is complete only once they run), but
# next to the rest. Dependencies cannot be dropped in a drop-in, so the
# package's unit is copied to /etc with those two orderings removed.
for u in systemd-resolved.service systemd-timesyncd.service; do
	[ -e "$t/lib/systemd/system/$u" ] || continue
	sed -E '/^Before=/{s/([= ])sysinit\.target( |$)/\1/; s/([= ])network\.target( |$)/\1/}' "$t/lib/systemd/system/$u" >"$t/etc/systemd/system/$u"
	if grep -qE '^Before=(.* )?(sysinit|network)\.target( |$)' "$t/etc/systemd/system/$u"; then
		die "$u: could not drop its sysinit/network.target ordering"
	fi
done
in_root update-initramfs -u -k all >&2
umounts

# Boot files. One grub.cfg for both: BIOS grub (core.img with the prefix
# (hd0,gpt3)/boot/grub, modules from /boot/grub/i386-pc) and the signed UEFI
# grub (monolithic: loads grub.cfg from its own directory, a stub that finds
# the root fs by UUID). /vmlinuz and /initrd.img are the kernel package's
# symlinks, so a kernel update in the guest keeps booting.
kern=/vmlinuz initrd=/initrd.img
[ -e "$t/vmlinuz" ] || { kern=/boot/$(cd "$t/boot" && ls vmlinuz-* | sort -V | tail -n1); initrd=/boot/$(cd "$t/boot" && ls initrd.img-* | sort -V | tail -n1); }
mkdir -p "$t/boot/grub/i386-pc"
cp "$t"/usr/lib/grub/i386-pc/*.mod "$t"/usr/lib/grub/i386-pc/*.lst "$t/boot/grub/i386-pc/"
cat >"$t/boot/grub/grub.cfg" <<CFG
# BigFleet golden image ($golden). Written by scripts/golden/build.sh.
set default=0
set timeout=0
serial --unit=0 --speed=115200
terminal_input console serial
terminal_output console serial
search --no-floppy --fs-uuid --set=root $root_uuid
menuentry 'Debian GNU/Linux ($golden, BigFleet golden image)' {
	linux $kern root=UUID=$root_uuid ro console=tty0 console=ttyS0,115200n8
	initrd $initrd
}
CFG
printf 'search.fs_uuid %s root\nset prefix=($root)/boot/grub\nconfigfile $prefix/grub.cfg\n' "$root_uuid" >"$work/efi-grub.cfg"
in_root grub-mkimage -O i386-pc -d /usr/lib/grub/i386-pc -o /tmp/core.img -p '(hd0,gpt3)/boot/grub' biosdisk part_gpt ext2 >&2
mv "$t/tmp/core.img" "$work/core.img"
cp "$t/usr/lib/grub/i386-pc/boot.img" "$work/boot.img"
shim=$t/usr/lib/shim/shimx64.efi.signed
[ -e "$shim" ] || shim=$(ls "$t"/usr/lib/shim/shimx64.efi.signed* | head -n1)
grubefi=$t/usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed
mm=$(ls "$t"/usr/lib/shim/mmx64.efi.signed* 2>/dev/null | head -n1 || true)
[ -s "$shim" ] && [ -s "$grubefi" ] || die "signed shim/grub missing in the tree"

# packages.tsv: the exact versions (the image's bill of materials)
in_root dpkg-query -W -f='${Package}\t${Version}\n' >"$work/packages.tsv"
rm -rf "$t/var/lib/apt/lists/"* "$t/var/cache/apt/"*.bin "$t/var/log/"*.log "$t/tmp/"* 2>/dev/null || true
find "$t" -xdev -newermt "@$SOURCE_DATE_EPOCH" -print0 2>/dev/null | xargs -0r touch -h -d "@$SOURCE_DATE_EPOCH" 2>/dev/null || true
# /usr as shipped is up to date: without these stamps every clone's first
# boot (so every Create) runs the ConditionNeedsUpdate units (ldconfig,
# the journal catalog, update-done) as if /usr had just been upgraded.
# Debian 13's systemd has them (Debian 12's ships no ldconfig.service nor
# systemd-update-done). The stamps are what systemd-update-done writes:
# /usr's mtime, clamped just above, so the same recipe gives the same bytes.
usr_ns=$(stat -c %Y "$t/usr")000000000
for d in etc var; do
	printf '# Written by scripts/golden/build.sh as systemd-update-done would:\n# /usr is as new as this stamp. See systemd-update-done.service(8).\nTIMESTAMP_NSEC=%s\n' "$usr_ns" >"$t/$d/.updated"
	touch -h -d "@$SOURCE_DATE_EPOCH" "$t/$d/.updated" "$t/$d"
done

# ---- disk: GPT, BIOS boot (1 MiB) + ESP (127 MiB) + root -------------------------
raw="$work/disk.raw"
truncate -s "$size" "$raw"
sgdisk -Z -U "$(uuid_of disk)" \
	-n 1:2048:4095 -t 1:EF02 -c 1:bios-boot -u 1:"$(uuid_of p1)" \
	-n 2:4096:264191 -t 2:EF00 -c 2:esp -u 2:"$(uuid_of p2)" \
	-n 3:264192:0 -t 3:8304 -c 3:root -u 3:"$(uuid_of p3)" "$raw" >&2
rootstart=264192
rootend=$(sgdisk -i 3 "$raw" | sed -n 's/^Last sector: \([0-9]*\).*/\1/p')
[ -n "$rootend" ] || die "cannot read the root partition's end"

# ESP: vfat in a file, then copied in at its sector.
esp="$work/esp.img"
truncate -s $((260096 * 512)) "$esp"
# --invariant: the label's directory entry gets a fixed time, not the clock's.
# It also fixes the serial, so -i must come after it (fstab mounts by it).
mkfs.vfat --invariant -F 32 -n ESP -i "$esp_id" "$esp" >&2
export MTOOLS_SKIP_CHECK=1
minfo -i "$esp" :: | grep -qi "serial number: $esp_id" || die "the ESP's serial is not $esp_id"
mmd -i "$esp" ::/EFI ::/EFI/BOOT ::/EFI/debian
for d in BOOT debian; do
	mcopy -i "$esp" "$grubefi" ::/EFI/$d/grubx64.efi
	mcopy -i "$esp" "$work/efi-grub.cfg" ::/EFI/$d/grub.cfg
	[ -n "$mm" ] && mcopy -i "$esp" "$mm" ::/EFI/$d/mmx64.efi
done
mcopy -i "$esp" "$shim" ::/EFI/BOOT/BOOTX64.EFI
mcopy -i "$esp" "$shim" ::/EFI/debian/shimx64.efi
dd if="$esp" of="$raw" bs=512 seek=4096 conv=notrunc,sparse status=none

# Root: ext4 populated from the tree.
rootfs="$work/root.img"
truncate -s $(((rootend - rootstart + 1) * 512)) "$rootfs"
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH mkfs.ext4 -q -L root -U "$root_uuid" -E hash_seed="$root_uuid" -d "$t" "$rootfs" >&2
rm -rf --one-file-system "$t"
# mkfs.ext4 -d copies each file's ctime and atime, which no touch can set:
# the build's own clock (every file the build touched or read). Set both to
# SOURCE_DATE_EPOCH on every inode in use, so two builds match bit for bit.
used_inodes "$rootfs" | sed "s/.*/sif <&> ctime @$SOURCE_DATE_EPOCH\nsif <&> atime @$SOURCE_DATE_EPOCH/" >"$work/times.debugfs"
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH debugfs -w -f "$work/times.debugfs" "$rootfs" >/dev/null 2>&1 ||
	die "debugfs could not set the inode times"
e2fsck -fn "$rootfs" >&2 || die "the root filesystem does not check clean"
dd if="$rootfs" of="$raw" bs=1M seek=$((rootstart * 512 / 1048576)) conv=notrunc,sparse status=none
rm -f "$rootfs"

# BIOS: boot.img in the MBR's code area (the GPT's protective partition table
# stays), pointing at core.img in the BIOS boot partition (sector 2048), whose
# first block list says where the rest of it is: what grub-bios-setup does.
le64() { printf '%016x' "$1" | sed -E 's/(..)(..)(..)(..)(..)(..)(..)(..)/\\x\8\\x\7\\x\6\\x\5\\x\4\\x\3\\x\2\\x\1/'; }
[ "$(stat -c %s "$work/core.img")" -le $((2048 * 512)) ] || die "core.img does not fit the BIOS boot partition"
printf "$(le64 2048)" | dd of="$work/boot.img" bs=1 seek=$((0x5c)) conv=notrunc status=none  # kernel sector
printf '\x90\x90' | dd of="$work/boot.img" bs=1 seek=$((0x66)) conv=notrunc status=none      # no drive check
printf "$(le64 2049)" | dd of="$work/core.img" bs=1 seek=$((0x200 - 12)) conv=notrunc status=none # rest of core.img
dd if="$work/boot.img" of="$raw" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$raw" bs=512 seek=2048 conv=notrunc status=none
sgdisk -v "$raw" >&2 || die "the GPT does not verify"


rm -rf "$out.tmp"
mkdir -p "$out.tmp"
qemu-img convert -f raw -O qcow2 "$raw" "$out.tmp/$golden.qcow2"
mv "$work/packages.tsv" "$out.tmp/packages.tsv"
(cd "$out.tmp" && sha256sum "$golden.qcow2" >"$golden.qcow2.sha256")
echo "$((($(date +%s) - start)))" >"$out.tmp/build-seconds"
rm -rf "$out"
mv "$out.tmp" "$out"
# drop older builds of this release (the deb cache stays)
for d in "$cache"/*/; do
	d=${d%/}
	[ "$d" = "$out" ] && continue
	[ -e "$d/$golden.qcow2" ] && rm -rf "$d"
done
log "built $key in $(cat "$out/build-seconds")s: $(du -h --apparent-size "$img" | cut -f1) qcow2 ($(qemu-img info --output=json "$img" | grep -o '"virtual-size": [0-9]*' | grep -o '[0-9]*$') bytes virtual), $(wc -l <"$out/packages.tsv") packages"
echo "IMAGE=$img"
