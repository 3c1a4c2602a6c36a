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
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=0755 tmpfs "$root/run"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
hostname "$name"
exec chroot "$root" /usr/local/sbin/bigfleet-lab-init
