#!/bin/bash
# The real libvirt test environment for the BigFleet libvirt provider:
# libvirtd + virtlogd without systemd, a `bigfleet` storage pool with a golden
# image, a network, and a tiny direct-kernel-boot guest running qemu-guest-agent.
#
#   scripts/libvirt-env.sh up      install what is missing, start daemons, stage
#                                  everything, write and print the env file
#   scripts/libvirt-env.sh down    remove bf-* domains and their volumes, stop the
#                                  daemons THIS script started (and only those)
#   scripts/libvirt-env.sh status  show what is running
#   scripts/libvirt-env.sh env     print the env file
#   scripts/libvirt-env.sh restart-libvirtd [keep-cache]
#                                  clear libvirt's QEMU capability cache and
#                                  restart libvirtd (after changing /dev/kvm)
#
# `up` also prepares /dev/kvm as udev would and proves the accelerator by
# booting the test guest once under KVM (scripts/libvirt-env-kvm.sh); the env
# file says which: BIGFLEET_ACCEL ('kvm' or 'tcg (why)') and
# BIGFLEET_DOMAIN_TYPE (kvm|qemu).
# Env: BIGFLEET_KVM_PREPARE=0 leaves /dev/kvm as found; BIGFLEET_ACCEL_REPROBE=1
#      ignores the cached verdict; BIGFLEET_ACCEL_WAIT (s, default 45) bounds
#      the boot probe.
#
# Use: eval "$(scripts/libvirt-env.sh up)"   or   . /run/bigfleet-libvirt-env/env
# Needs root (Debian 12). Never installs libvirt-daemon-system (it pulls systemd).
# See docs/test-guest.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
URI=qemu:///system
STATE=${BIGFLEET_ENV_STATE:-/run/bigfleet-libvirt-env}
POOL=bigfleet
POOL_DIR=${BIGFLEET_POOL_DIR:-/var/lib/libvirt/bigfleet-pool}
GOLDEN=bigfleet-golden.qcow2
GOLDEN_SIZE=64M
BOOT_DIR=/var/lib/libvirt/bigfleet-boot
CMDLINE='console=ttyS0 panic=-1 quiet'
CAPS_CACHE=/var/cache/libvirt/qemu/capabilities
export BIGFLEET_GUEST_CACHE=${BIGFLEET_GUEST_CACHE:-/var/cache/bigfleet-libvirt/guest}
export DEBIAN_FRONTEND=noninteractive

PACKAGES=(libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients libvirt-dev
	qemu-system-x86 qemu-utils pkg-config busybox-static qemu-guest-agent cpio
	gzip xz-utils zstd util-linux procps iproute2 genisoimage
	ovmf swtpm swtpm-tools)

log() { echo "libvirt-env: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
virsh_() { virsh -q -c "$URI" "$@"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1fs", b-a}'; }

[ "$(id -u)" = 0 ] || die "must run as root"

lock() {
	mkdir -p "$STATE"
	exec 8>"$STATE/.lock"
	flock -w 600 8 || die "another libvirt-env.sh run holds $STATE/.lock"
}

# ---- (1) packages -------------------------------------------------------------
installed() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -x installed >/dev/null; }

ensure_packages() {
	"$here/ensure-packages.sh" "${PACKAGES[@]}"
	installed libvirt-daemon-system && log "WARNING: libvirt-daemon-system is installed (not by us)"
	return 0
}

# ---- (2) user ----------------------------------------------------------------
# (`useradd -G kvm` used to drop the group silently where it did not exist:
# membership of kvm is prepare_kvm's job.)
ensure_user() {
	getent group libvirt-qemu >/dev/null || groupadd --system libvirt-qemu
	getent passwd libvirt-qemu >/dev/null ||
		useradd --system -g libvirt-qemu -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu
	getent group libvirt >/dev/null || groupadd --system libvirt
}

# ---- (3) daemons ---------------------------------------------------------------
pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
daemon_answers() { timeout 10 virsh -c "$URI" version >/dev/null 2>&1; }

# libvirt re-probes QEMU on every call when its cached capabilities disagree
# with /dev/kvm (seen with a root-only /dev/kvm: `virsh version` 3.9 s).
# Two calls in a row tell whether the cache holds.
check_reprobe() {
	local t
	daemon_answers
	t=$(now)
	daemon_answers
	t=$(since "$t")
	if awk -v t="${t%s}" 'BEGIN{exit !(t > 2)}'; then
		log "WARNING: libvirtd re-probes QEMU on every call (virsh version took $t): /dev/kvm changed under it?"
	else
		log "virsh version answers in $t"
	fi
}

# host_pgrep NAME: a NAME process of this PID namespace runs. The lab's
# hosts (scripts/lab.sh) run their own libvirtd and virtlogd in PID
# namespaces of their own: seen from here, but not this machine's.
host_pgrep() { pgrep --ns $$ --nslist pid -x "$1" >/dev/null 2>&1; }

# Restarts the libvirtd at /run/libvirtd.pid with an empty capability cache
# (`restart-libvirtd`: host-kinds.sh, after changing /dev/kvm under the
# lock; `restart-libvirtd keep-cache` after restoring a saved cache). A
# daemon this script did not start stays "not ours" afterwards.
cmd_restart_libvirtd() {
	lock
	local pid ours=0
	[ "${1:-}" = keep-cache ] || rm -rf "${CAPS_CACHE:?}"/*
	if pid_alive /run/libvirtd.pid; then
		pid=$(cat /run/libvirtd.pid)
		[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = libvirtd ] || die "pid $pid in /run/libvirtd.pid is not libvirtd"
		[ "$(cat "$STATE/libvirtd.started" 2>/dev/null)" = "$pid" ] && ours=1
		stop_pid libvirtd "$pid" || die "libvirtd (pid $pid) does not stop"
		rm -f "$STATE/libvirtd.started"
	elif host_pgrep libvirtd; then
		die "libvirtd runs without /run/libvirtd.pid (not a plain daemon): restart it yourself"
	fi
	start_daemons
	[ "$ours" = 1 ] || rm -f "$STATE/libvirtd.started"
	check_reprobe
}

# daemon CMD...: starts a daemon with no descriptor but 0-2 (the caller's
# locks, e.g. `flock /tmp/bf-real-libvirt.lock`, must not live on in a
# daemon: it would hold the lock for good).
daemon() {
	(
		for fd in /proc/$BASHPID/fd/*; do
			fd=${fd##*/}
			[ "$fd" -gt 2 ] && eval "exec $fd>&-"
		done
		exec setsid "$@" </dev/null
	)
}

start_daemons() {
	mkdir -p /var/log/libvirt/qemu /var/lib/libvirt /run/libvirt
	if ! pid_alive /run/virtlogd.pid && ! host_pgrep virtlogd; then
		log "starting virtlogd"
		rm -f /run/virtlogd.pid
		daemon virtlogd -d >>"$STATE/virtlogd.out" 2>&1
		local i
		for i in $(seq 50); do pid_alive /run/virtlogd.pid && break; sleep 0.1; done
		pid_alive /run/virtlogd.pid || die "virtlogd did not start (see $STATE/virtlogd.out)"
		cat /run/virtlogd.pid >"$STATE/virtlogd.started"
	fi
	if daemon_answers; then return 0; fi
	if pid_alive /run/libvirtd.pid; then
		log "libvirtd (pid $(cat /run/libvirtd.pid)) runs but does not answer yet; waiting"
	else
		log "starting libvirtd"
		rm -f /run/libvirtd.pid
		daemon libvirtd -d -p /run/libvirtd.pid >>"$STATE/libvirtd.out" 2>&1
		local i
		for i in $(seq 50); do pid_alive /run/libvirtd.pid && break; sleep 0.1; done
		pid_alive /run/libvirtd.pid || die "libvirtd did not start (see $STATE/libvirtd.out, /var/log/libvirt)"
		cat /run/libvirtd.pid >"$STATE/libvirtd.started"
	fi
	local t0 i
	t0=$(now)
	for i in $(seq 120); do
		daemon_answers && { log "libvirtd answers after $(since "$t0")"; return 0; }
		sleep 0.5
	done
	die "libvirtd did not answer within 60 s"
}

. "$here/libvirt-env-kvm.sh"

# ---- (4) pool and network -----------------------------------------------------------
ensure_pool() {
	mkdir -p "$POOL_DIR"
	if ! virsh_ pool-info "$POOL" >/dev/null 2>&1; then
		log "defining pool $POOL at $POOL_DIR"
		virsh_ pool-define-as "$POOL" dir --target "$POOL_DIR" >/dev/null
		virsh_ pool-build "$POOL" >/dev/null 2>&1 || true
	fi
	virsh_ pool-info "$POOL" | grep '^State:.*running' >/dev/null || virsh_ pool-start "$POOL" >/dev/null
	virsh_ pool-autostart "$POOL" >/dev/null 2>&1 || true
	virsh_ pool-refresh "$POOL" >/dev/null
}

net_active() { virsh_ net-info "$1" 2>/dev/null | grep '^Active:.*yes' >/dev/null; }

# Prefer libvirt's `default` network when it already exists and starts here.
# Otherwise (the usual case without libvirt-daemon-system: there is no
# `default`, and no iptables/dnsmasq) use `bigfleet`: a plain Linux bridge this
# script creates, wrapped as a libvirt network in bridge mode. libvirt adds no
# firewall rules and runs no dnsmasq for bridge-mode networks, so nothing
# beyond iproute2 is needed. The bridge has no uplink and no IP: isolated.
BRIDGE=virbr-bf0
ensure_bridge() {
	ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
	ip link set "$BRIDGE" up
}

ensure_network() {
	local want=${BIGFLEET_NETWORK:-}
	if [ -z "$want" ] || [ "$want" = default ]; then
		if virsh_ net-info default >/dev/null 2>&1; then
			net_active default || virsh_ net-start default >/dev/null 2>>"$STATE/network.err" || true
			if net_active default; then echo default; return 0; fi
			log "network 'default' exists but does not start here (see $STATE/network.err); using 'bigfleet'"
		fi
	fi
	want=${want:-bigfleet}
	[ "$want" = default ] && want=bigfleet
	ensure_bridge
	if virsh_ net-info "$want" >/dev/null 2>&1 &&
		! virsh_ net-dumpxml "$want" | grep "<forward mode='bridge'" >/dev/null; then
		log "redefining network $want in bridge mode"
		virsh_ net-destroy "$want" >/dev/null 2>&1 || true
		virsh_ net-undefine "$want" >/dev/null
	fi
	if ! virsh_ net-info "$want" >/dev/null 2>&1; then
		log "defining network $want (bridge mode on isolated bridge $BRIDGE)"
		local x
		x=$(mktemp)
		cat >"$x" <<XML
<network>
  <name>$want</name>
  <forward mode='bridge'/>
  <bridge name='$BRIDGE'/>
</network>
XML
		virsh_ net-define "$x" >/dev/null
		rm -f "$x"
	fi
	net_active "$want" || virsh_ net-start "$want" >/dev/null
	virsh_ net-autostart "$want" >/dev/null 2>&1 || true
	net_active "$want" || die "network $want does not start"
	echo "$want"
}

# ---- (5) guest ------------------------------------------------------------------
# Copies only when content changed: qemu reads kernel/initrd at domain start.
install_if_changed() {
	if ! cmp -s "$1" "$2"; then
		install -m 0644 "$1" "$2.tmp"
		mv -f "$2.tmp" "$2"
	fi
	chmod 0644 "$2"
}

stage_guest() {
	local out kernel initrd
	out=$("$here/guest/build.sh")
	kernel=$(sed -n 's/^KERNEL=//p' <<<"$out")
	initrd=$(sed -n 's/^INITRD=//p' <<<"$out")
	mkdir -p "$BOOT_DIR"
	chmod 0755 "$BOOT_DIR"
	install_if_changed "$kernel" "$BOOT_DIR/vmlinuz"
	install_if_changed "$initrd" "$BOOT_DIR/initrd.img"
}

# ---- (6) golden image --------------------------------------------------------------
ensure_golden() {
	if ! virsh_ vol-info --pool "$POOL" "$GOLDEN" >/dev/null 2>&1; then
		log "creating golden image $GOLDEN ($GOLDEN_SIZE qcow2)"
		virsh_ vol-create-as "$POOL" "$GOLDEN" "$GOLDEN_SIZE" --format qcow2 >/dev/null
	fi
	chmod 0644 "$POOL_DIR/$GOLDEN" 2>/dev/null || true
}

# ---- (7) env file ---------------------------------------------------------------------
write_env() {
	cat >"$STATE/env.tmp" <<ENV
export BIGFLEET_LIBVIRT_URI=$URI
export BIGFLEET_POOL=$POOL
export BIGFLEET_IMAGE=$GOLDEN
export BIGFLEET_NETWORK=$1
export BIGFLEET_KERNEL=$BOOT_DIR/vmlinuz
export BIGFLEET_INITRD=$BOOT_DIR/initrd.img
export BIGFLEET_CMDLINE='$CMDLINE'
export BIGFLEET_ACCEL='$ACCEL'
export BIGFLEET_DOMAIN_TYPE=$DOMAIN_TYPE
ENV
	mv "$STATE/env.tmp" "$STATE/env"
}

cmd_up() {
	local t0 t net
	t0=$(now)
	lock
	t=$(now); ensure_packages; log "packages ok ($(since "$t"))"
	ensure_user
	prepare_kvm
	[ "$KVM_CHANGED" = 1 ] && refresh_libvirtd
	t=$(now); start_daemons; log "daemons ok ($(since "$t"))"
	[ "$KVM_CHANGED" = 1 ] && check_reprobe
	ensure_pool
	net=$(ensure_network)
	t=$(now); stage_guest; log "guest ok ($(since "$t"))"
	ensure_golden
	t=$(now); probe_accel; log "accelerator decided ($(since "$t"))"
	write_env "$net"
	echo "accelerator: $ACCEL" >&2
	log "up in $(since "$t0"); env file $STATE/env (network: $net)"
	cat "$STATE/env"
}

# Removes our test domains (bf-*) and their volumes, never the golden image.
cleanup_domains() {
	local d paths p
	for d in $(virsh_ list --all --name | grep '^bf-' || true); do
		paths=$(virsh_ domblklist "$d" --details 2>/dev/null | awk '$1=="file"{print $4}')
		virsh_ destroy "$d" >/dev/null 2>&1 || true
		virsh_ undefine "$d" --nvram >/dev/null 2>&1 || virsh_ undefine "$d" >/dev/null 2>&1 || true
		for p in $paths; do
			case "$p" in */"$GOLDEN" | "$BOOT_DIR"/*) continue ;; esac
			virsh_ vol-delete "$p" >/dev/null 2>&1 || true
		done
		log "removed domain $d"
	done
	if virsh_ pool-info "$POOL" >/dev/null 2>&1; then
		virsh_ pool-refresh "$POOL" >/dev/null 2>&1 || true
		for p in $(virsh_ vol-list "$POOL" 2>/dev/null | awk '{print $1}' | grep '^bf-' || true); do
			virsh_ vol-delete --pool "$POOL" "$p" >/dev/null 2>&1 && log "removed volume $p"
		done
	fi
	return 0
}

stop_pid() { # name pid
	local i
	kill -TERM "$2" 2>/dev/null || return 0
	for i in $(seq 100); do kill -0 "$2" 2>/dev/null || { log "stopped $1 (pid $2)"; return 0; }; sleep 0.1; done
	log "$1 (pid $2) still running after 10 s"
	return 1
}

cmd_down() {
	lock
	if daemon_answers; then cleanup_domains; fi
	local f name pid
	for name in libvirtd virtlogd; do
		f="$STATE/$name.started"
		[ -s "$f" ] || { log "$name was not started by this script; leaving it"; continue; }
		pid=$(cat "$f")
		# only signal the process we started: the pid must still be that daemon
		if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]; then stop_pid "$name" "$pid"; fi
		rm -f "$f"
	done
	rm -f "$STATE/env"
}

cmd_status() {
	local name pf
	for name in virtlogd libvirtd; do
		pf=/run/$name.pid
		if pid_alive "$pf"; then
			printf '%-9s running pid %s%s\n' "$name" "$(cat "$pf")" \
				"$([ -s "$STATE/$name.started" ] && echo ' (started by libvirt-env.sh)')"
		else
			printf '%-9s not running\n' "$name"
		fi
	done
	if daemon_answers; then
		virsh -c "$URI" version 2>/dev/null | sed 's/^/  /'
		echo "pools:";    virsh_ pool-list --all | sed 's/^/  /'
		echo "networks:"; virsh_ net-list --all | sed 's/^/  /'
		echo "volumes in $POOL:"; virsh_ vol-list "$POOL" 2>/dev/null | sed 's/^/  /'
		echo "domains:";  virsh_ list --all | sed 's/^/  /'
	else
		echo "libvirtd does not answer on $URI"
	fi
	if [ -s "$STATE/env" ]; then
		echo "accelerator: $(sed -n "s/^export BIGFLEET_ACCEL='\(.*\)'$/\1/p" "$STATE/env")"
		echo "env ($STATE/env):"
		sed 's/^/  /' "$STATE/env"
	fi
	return 0
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
env) cat "$STATE/env" ;;
restart-libvirtd) cmd_restart_libvirtd "${2:-}" ;;
*) echo "usage: $0 up|down|status|env|restart-libvirtd" >&2; exit 2 ;;
esac
