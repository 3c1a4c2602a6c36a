#!/bin/bash
# /usr/local/sbin/bigfleet-lab-init: PID 1 inside a lab host's root. Applies
# the host setup (bigfleet-lab-setup, idempotent), starts the host's daemons
# in the order a Debian host's init would (D-Bus, polkitd, sshd, virtlogd,
# libvirtd), then reaps orphans for good. The host's facts come from
# /etc/bigfleet-lab/host.env (written by scripts/lab.sh).
set -uo pipefail
. /etc/bigfleet-lab/host.env
exec >>/var/log/bigfleet-lab-init.log 2>&1
echo "=== boot $(date -Is) $LAB_NAME ($LAB_MODE)"
ip link set lo up
ip link show virbr-bf0 >/dev/null 2>&1 || ip link add virbr-bf0 type bridge
ip link set virbr-bf0 up
/usr/local/sbin/bigfleet-lab-setup || echo "host setup failed: $?"
mkdir -p /run/dbus /run/sshd /run/libvirt /var/log/libvirt/qemu
dbus-daemon --system --fork --nopidfile
for i in $(seq 50); do [ -S /run/dbus/system_bus_socket ] && break; sleep 0.1; done
runuser -u polkitd -- /usr/lib/polkit-1/polkitd --no-debug >>/var/log/polkitd.log 2>&1 &
/usr/sbin/sshd -E /var/log/sshd.log
/usr/local/sbin/bigfleet-lab-daemon start
trap : TERM INT
while :; do wait >/dev/null 2>&1; sleep 1; done
