#!/bin/bash
# /usr/local/sbin/bigfleet-lab-daemon start|kill|freeze|thaw|pid: the host's
# libvirtd and virtlogd (`lab.sh fault HOST kill-daemon|start-daemon|freeze|thaw`).
set -uo pipefail
. /etc/bigfleet-lab/host.env
pidof_() { local p; p=$(cat "/run/$1.pid" 2>/dev/null) && [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$1" ] && echo "$p"; }
case "$1" in
start)
	pidof_ virtlogd >/dev/null || virtlogd -d -p /run/virtlogd.pid
	pidof_ libvirtd >/dev/null && exit 0
	listen=; [ "$LAB_MODE" = tls ] && listen=--listen
	libvirtd -d $listen -p /run/libvirtd.pid
	for i in $(seq 100); do
		virsh -q -c qemu:///system version >/dev/null 2>&1 && exit 0
		sleep 0.2
	done
	echo "libvirtd does not answer" >&2; exit 1 ;;
kill)
	# Returns once it is gone: until then its listening socket may still
	# take a connection (and reset it) instead of refusing it.
	if p=$(pidof_ libvirtd); then
		kill -KILL "$p"
		for i in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
	fi
	rm -f /run/libvirtd.pid; exit 0 ;;
freeze) p=$(pidof_ libvirtd) && kill -STOP "$p" ;;
thaw) p=$(pidof_ libvirtd) && kill -CONT "$p" ;;
pid) pidof_ libvirtd ;;
*) echo "usage: bigfleet-lab-daemon start|kill|freeze|thaw|pid" >&2; exit 2 ;;
esac
