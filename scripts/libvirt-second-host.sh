#!/bin/bash
# A second, independent libvirt host on this machine, for the zone-of-hosts
# tests (issue 12, docs/pools.md): a session-mode libvirtd run as a
# dedicated system user, reached by root through its socket URI, with its own
# storage pool and golden image under that user's home. It stands beside the
# system daemon of scripts/libvirt-env.sh; stopping either leaves the other
# serving.
#
#   scripts/libvirt-second-host.sh up            create the user, start its
#                                                daemon, stage pool and image,
#                                                write and print the env file
#   scripts/libvirt-second-host.sh down          remove its domains, stop its
#                                                daemons, remove the user, its
#                                                home and run dir (only if up
#                                                created them)
#   scripts/libvirt-second-host.sh stop-daemon   SIGTERM its libvirtd only:
#                                                guests keep running (a host
#                                                whose daemon is down)
#   scripts/libvirt-second-host.sh start-daemon  start it again
#   scripts/libvirt-second-host.sh status|env
#
# The provider's --storage-pool, --image, --kernel/--initrd and --domain-type
# are global, so this host offers the same pool and image names as the system
# one (from its env file) and boots the same kernel files (world-readable).
# A session daemon has no libvirt networks: run the provider with
# --network= (no NIC; the guest agent talks over virtio-serial).
#
# Touches libvirt: run it under `flock /tmp/bf-real-libvirt.lock`. Needs root.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
H2_USER=${BIGFLEET_HOST2_USER:-bfhost2}
H2_HOME=/var/lib/$H2_USER
H2_RUN=/run/$H2_USER
SOCK=$H2_RUN/libvirt/libvirt-sock
PIDFILE=$H2_RUN/libvirtd.pid
URI="qemu+unix:///session?socket=$SOCK"
POOL_DIR=$H2_HOME/pool
STATE=${BIGFLEET_HOST2_STATE:-/run/bigfleet-second-host}
SYS_ENV=${BIGFLEET_ENV_FILE:-/run/bigfleet-libvirt-env/env}

log() { echo "second-host: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
v() { virsh -q -c "$URI" "$@"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1fs", b-a}'; }

[ "$(id -u)" = 0 ] || die "must run as root"

pid_of() { [ -s "$PIDFILE" ] && cat "$PIDFILE"; }
# alive: the pid file names a libvirtd of our user (a stale file never
# makes us signal a stranger).
alive() {
	local pid
	pid=$(pid_of) || return 1
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = libvirtd ] &&
		[ "$(stat -c %U "/proc/$pid" 2>/dev/null)" = "$H2_USER" ]
}
answers() { timeout 10 virsh -c "$URI" version >/dev/null 2>&1; }

# as_user CMD...: runs CMD as the host's user, its session environment set,
# with no descriptor but 0-2 (a caller's flock must not live on in a daemon).
as_user() {
	(
		for fd in /proc/$BASHPID/fd/*; do
			fd=${fd##*/}
			[ "$fd" -gt 2 ] && eval "exec $fd>&-"
		done
		exec setsid setpriv --reuid="$H2_USER" --regid="$H2_USER" --init-groups \
			env -i HOME="$H2_HOME" USER="$H2_USER" XDG_RUNTIME_DIR="$H2_RUN" \
			PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@" </dev/null
	)
}

ensure_user() {
	mkdir -p "$STATE"
	if ! getent passwd "$H2_USER" >/dev/null; then
		log "creating user $H2_USER (home $H2_HOME)"
		useradd --system --user-group --home-dir "$H2_HOME" --create-home --shell /usr/sbin/nologin "$H2_USER"
		touch "$STATE/user.created"
	elif [ ! -e "$STATE/user.created" ]; then
		die "user $H2_USER exists and was not created by this script: set BIGFLEET_HOST2_USER"
	fi
	# Same accelerator as the system host: QEMU as this user opens /dev/kvm
	# through the kvm group, as libvirt-qemu does.
	if getent group kvm >/dev/null; then usermod -aG kvm "$H2_USER"; fi
	install -d -o "$H2_USER" -g "$H2_USER" -m 0700 "$H2_RUN"
}

start_daemon() {
	if answers; then return 0; fi
	if ! alive; then
		log "starting session libvirtd as $H2_USER"
		rm -f "$PIDFILE"
		as_user libvirtd -d -p "$PIDFILE" >>"$STATE/libvirtd.out" 2>&1
	fi
	local t0 i
	t0=$(now)
	for i in $(seq 120); do
		answers && { log "libvirtd (pid $(pid_of)) answers on $URI after $(since "$t0")"; return 0; }
		sleep 0.5
	done
	die "session libvirtd did not answer within 60 s (see $STATE/libvirtd.out)"
}

ensure_pool() {
	local pool=$1 image=$2
	if ! v pool-info "$pool" >/dev/null 2>&1; then
		log "defining pool $pool at $POOL_DIR"
		v pool-define-as "$pool" dir --target "$POOL_DIR" >/dev/null
		v pool-build "$pool" >/dev/null 2>&1 || true
	fi
	v pool-info "$pool" | grep '^State:.*running' >/dev/null || v pool-start "$pool" >/dev/null
	v pool-autostart "$pool" >/dev/null 2>&1 || true
	v pool-refresh "$pool" >/dev/null
	if ! v vol-info --pool "$pool" "$image" >/dev/null 2>&1; then
		# The system host's image, copied as an operator distributes one,
		# with its timestamps: a migration trusts another host's golden
		# image only if format, sizes and mtime match (docs/pools.md).
		local src
		src=$(virsh -q -c qemu:///system vol-path --pool "$pool" "$image" 2>/dev/null || true)
		if [ -n "$src" ] && [ -f "$src" ]; then
			log "copying golden image $image from the system host into $pool"
			cp --preserve=timestamps "$src" "$POOL_DIR/$image"
			chown "$H2_USER:" "$POOL_DIR/$image"
			v pool-refresh "$pool" >/dev/null
		else
			log "creating golden image $image in $pool"
			v vol-create-as "$pool" "$image" 64M --format qcow2 >/dev/null
		fi
	fi
}

write_env() {
	cat >"$STATE/env.tmp" <<ENV
export BIGFLEET_HOST2_URI='$URI'
export BIGFLEET_HOST2_USER=$H2_USER
export BIGFLEET_HOST2_SOCKET=$SOCK
export BIGFLEET_HOST2_PID_FILE=$PIDFILE
export BIGFLEET_HOST2_POOL_DIR=$POOL_DIR
export BIGFLEET_HOST2_LOG_DIR=$H2_HOME/.cache/libvirt/qemu/log
ENV
	mv "$STATE/env.tmp" "$STATE/env"
}

cmd_up() {
	local t0
	t0=$(now)
	# The system host first: packages, kernel, initrd, and the names.
	if [ ! -s "$SYS_ENV" ] || ! timeout 10 virsh -c qemu:///system version >/dev/null 2>&1; then
		"$here/libvirt-env.sh" up >/dev/null
	fi
	# shellcheck disable=SC1090
	. "$SYS_ENV"
	ensure_user
	start_daemon
	ensure_pool "$BIGFLEET_POOL" "$BIGFLEET_IMAGE"
	write_env
	log "up in $(since "$t0"); env file $STATE/env"
	cat "$STATE/env"
}

# remove_domains destroys and undefines every domain of the session daemon
# (the user is ours: everything there is a test's), and their overlays.
remove_domains() {
	local d
	for d in $(v list --all --name 2>/dev/null || true); do
		v destroy "$d" >/dev/null 2>&1 || true
		v undefine "$d" --nvram >/dev/null 2>&1 || v undefine "$d" >/dev/null 2>&1 || true
		log "removed domain $d"
	done
}

stop_pid() { # pid
	local i
	kill -TERM "$1" 2>/dev/null || return 0
	for i in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
	log "pid $1 still running after 10 s: SIGKILL"
	kill -KILL "$1" 2>/dev/null || true
}

cmd_stop_daemon() {
	alive || { log "libvirtd of $H2_USER is not running"; return 0; }
	local pid
	pid=$(pid_of)
	stop_pid "$pid"
	log "stopped libvirtd (pid $pid); its guests keep running"
}

cmd_down() {
	if [ ! -e "$STATE/user.created" ]; then
		log "user $H2_USER was not created by this script; nothing to do"
		rm -f "$STATE/env"
		return 0
	fi
	if answers; then remove_domains; fi
	alive && stop_pid "$(pid_of)"
	# What is left of the user's processes (virtlogd it spawned, a guest of a
	# daemon that was stopped) is ours: the user exists only for this host.
	local pid
	for pid in $(pgrep -u "$H2_USER" || true); do
		log "stopping $(cat "/proc/$pid/comm" 2>/dev/null) (pid $pid)"
		stop_pid "$pid"
	done
	userdel --remove "$H2_USER" 2>/dev/null || userdel "$H2_USER"
	getent group "$H2_USER" >/dev/null && groupdel "$H2_USER"
	rm -rf "${H2_HOME:?}" "${H2_RUN:?}"
	rm -f "$STATE/user.created" "$STATE/env" "$STATE/libvirtd.out"
	rmdir "$STATE" 2>/dev/null || true
	log "down: user $H2_USER, $H2_HOME and $H2_RUN removed"
}

cmd_status() {
	if alive; then echo "libvirtd of $H2_USER: running pid $(pid_of)"; else echo "libvirtd of $H2_USER: not running"; fi
	if answers; then
		virsh -c "$URI" version 2>/dev/null | sed 's/^/  /'
		echo "pools:"; v pool-list --all | sed 's/^/  /'
		echo "domains:"; v list --all | sed 's/^/  /'
	fi
	[ -s "$STATE/env" ] && { echo "env ($STATE/env):"; sed 's/^/  /' "$STATE/env"; }
	return 0
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
stop-daemon) cmd_stop_daemon ;;
start-daemon) start_daemon ;;
status) cmd_status ;;
env) cat "$STATE/env" ;;
*) echo "usage: $0 up|down|stop-daemon|start-daemon|status|env" >&2; exit 2 ;;
esac
