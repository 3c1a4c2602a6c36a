#!/bin/bash
# PID 1 of a lab host, run by scripts/lab.sh in the host's network namespace
# under `unshare --mount --pid --uts --ipc --fork`:
#   host-init.sh NAME DIR LOWER
# Mounts the host's root (an overlay: LOWER is the cached Debian root of its
# libvirt version, DIR/upper its own /etc and /var, kept across reboots),
# gives it fresh /proc, /sys, /run and /tmp, then chroots into it and hands
# over to /usr/local/sbin/bigfleet-lab-init. Killing this process kills the
# whole host (every daemon and guest): that is `lab.sh fault HOST reboot`.
set -euo pipefail
name=$1 dir=$2 lower=$3
root=$dir/root
mount --make-rprivate /
mkdir -p "$dir/upper" "$dir/work" "$root"
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$dir/upper,workdir=$dir/work" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
# A /dev of its own: the few nodes a host's daemons and TCG guests use, a
# private devpts, and no /dev/kvm. The machine's /dev/kvm belongs to its
# kvm group, which the host's libvirt-qemu is not in: libvirt would list
# kvm, QEMU could not open it, and libvirt would re-probe QEMU on every
# call (gigabytes of debug log). The lab's guests run in TCG.
mount -t tmpfs -o mode=0755,nosuid tmpfs "$root/dev"
for n in null zero full random urandom tty net/tun; do
	mkdir -p "$(dirname "$root/dev/$n")"
	touch "$root/dev/$n"
	mount --bind "/dev/$n" "$root/dev/$n"
done
mkdir -p "$root/dev/pts" "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
mount -t tmpfs -o mode=0755 tmpfs "$root/run"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
hostname "$name"
exec chroot "$root" /usr/local/sbin/bigfleet-lab-init
