#!/bin/bash
# One zone, two real libvirt hosts (docs/pools.md): the system libvirtd of
# scripts/libvirt-env.sh and the session libvirtd of
# scripts/libvirt-second-host.sh, served by one bin/libvirt from a hosts
# file. Shows, each step timed:
#   1. placement: two Creates at once land one on each host (spread);
#   2. a cordon (admin write over mTLS): the next Create avoids the host;
#   3. a live migration (admin write): the machine of step 2 moves to the
#      other host while it runs, `virsh` shows it there;
#   4. fill the zone, and the Create that no longer fits ends
#      FAILED at once, its last_error naming the zone, the request and the
#      best host's free capacity.
# Then deletes every machine and takes the second host down again: the
# machine is left as found. Exits non-zero, saying which step failed.
# Touches libvirt: on a shared machine run it under
# `flock /tmp/bf-real-libvirt.lock`.
set -euo pipefail
cd "$(dirname "$0")/.."
ENV_FILE=${BIGFLEET_ENV_FILE:-/run/bigfleet-libvirt-env/env}
grep -q '^export BIGFLEET_ACCEL=' "$ENV_FILE" 2>/dev/null || scripts/libvirt-env.sh up >/dev/null
# shellcheck disable=SC1090
source "$ENV_FILE"

work=$(mktemp -d)
addr=127.0.0.1:${DEMO_PORT:-9410}
name=demopool # --provider: its domains are bf-demopool-*
zone=pool
t0=$(date +%s.%N)
stamp() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%7.2fs", b-a}'; }
say() { echo "[$(stamp)] $*"; }
# timed LABEL CMD...: runs CMD (its output indented) and says how long it took.
timed() {
	local label=$1 s
	shift
	s=$(date +%s.%N)
	"$@" | sed 's/^/    /'
	say "  $label took $(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2fs", b-a}')"
}

fail() {
	echo "demo-pool: FAILED: $*" >&2
	echo "--- last 30 lines of the provider's log ---" >&2
	tail -n 30 "$work/provider.log" >&2 || true
	exit 1
}

# cleanup: stop the provider, remove whatever bf-demopool-* is left on the
# system host, take the second host down (it removes everything on it).
cleanup() {
	local rc=$? d p
	[ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	for d in $(virsh -q -c "$BIGFLEET_LIBVIRT_URI" list --all --name 2>/dev/null | grep "^bf-$name-" || true); do
		virsh -q -c "$BIGFLEET_LIBVIRT_URI" destroy "$d" >/dev/null 2>&1 || true
		virsh -q -c "$BIGFLEET_LIBVIRT_URI" undefine "$d" >/dev/null 2>&1 || true
		echo "demo-pool: cleanup: removed leftover domain $d" >&2
	done
	for p in $(virsh -q -c "$BIGFLEET_LIBVIRT_URI" vol-list "$BIGFLEET_POOL" 2>/dev/null | awk '{print $1}' | grep "^bf-$name-" || true); do
		virsh -q -c "$BIGFLEET_LIBVIRT_URI" vol-delete --pool "$BIGFLEET_POOL" "$p" >/dev/null 2>&1 || true
	done
	scripts/libvirt-second-host.sh down >/dev/null 2>&1 || echo "demo-pool: cleanup: second host down failed" >&2
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT

say "bringing up the second host (session libvirtd as user bfhost2)"
s=$(date +%s.%N)
scripts/libvirt-second-host.sh up >"$work/host2.env" || fail "the second host did not come up"
say "  second host up in $(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2fs", b-a}')"
# shellcheck disable=SC1091
source "$work/host2.env"

# Client certificates: the admin writes (cordon, …) need mTLS and a name on
# --admin-clients (by default bigfleet://admin); lifecycle calls need a
# shard's certificate (--caller-identity=bigfleet, the default under mTLS).
scripts/demo-pki.sh "$work/pki"
# Lifecycle calls are a shard's (its certificate names the token's shard,
# libvirtctl stamps the sequence); the rest is the admin tooling's.
ctl() {
	local who=admin
	case "${1:-}" in create | configure | drain | delete) who=shard ;; esac
	bin/libvirtctl --addr "$addr" --tls-ca "$work/pki/ca.pem" --tls-cert "$work/pki/$who.pem" \
		--tls-key "$work/pki/$who-key.pem" "$@"
}

# Each host has this machine's CPUs; CPU overcommit 2.5/CPUs leaves 2.5
# placeable vCPUs per host: two 1-vCPU machines fit on each, a fifth does
# not fit in the zone.
cpus=$(virsh -q -c "$BIGFLEET_LIBVIRT_URI" nodeinfo | awk -F: '$1=="CPU(s)"{gsub(/ /,"",$2); print $2}')
cpu_oc=$(awk -v n="$cpus" 'BEGIN{printf "%.4f", 2.5/n}')
cat >"$work/hosts.yaml" <<YAML
hosts:
  - name: system
    zone: $zone
    uri: $BIGFLEET_LIBVIRT_URI
    labels: {daemon: system}
    overcommit: {cpu: $cpu_oc, memory: 1.0}
  - name: session
    zone: $zone
    uri: "$BIGFLEET_HOST2_URI"
    labels: {daemon: session}
    overcommit: {cpu: $cpu_oc, memory: 1.0}
YAML
echo '[{"name":"demo.tiny","vcpu":1,"memory_mib":256}]' >"$work/types.json"
echo '[{"instance_type":"demo.tiny","zone":"pool","capacity_type":"on_demand","count":6}]' >"$work/offerings.json"

# Both daemons are on this machine without QEMU TLS certificates: the
# demo's migration is asked for in plain (--migrate-tls=false, logged as
# a WARN); between real hosts it is encrypted (deploy/host-setup).
bin/libvirt --addr "$addr" --metrics-addr= --provider "$name" --hosts "$work/hosts.yaml" \
	--domain-type "$BIGFLEET_DOMAIN_TYPE" --storage-pool "$BIGFLEET_POOL" --image "$BIGFLEET_IMAGE" --network= \
	--kernel "$BIGFLEET_KERNEL" --initrd "$BIGFLEET_INITRD" --cmdline "$BIGFLEET_CMDLINE" \
	--instance-types "$work/types.json" --offerings "$work/offerings.json" \
	--tls-cert "$work/pki/server.pem" --tls-key "$work/pki/server-key.pem" --tls-ca "$work/pki/ca.pem" \
	--admin-write --reconcile-interval 5s \
	--migrate-tls=false \
	>"$work/provider.out" 2>"$work/provider.log" &
pid=$!
for _ in $(seq 600); do ctl list >/dev/null 2>&1 && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
ctl list >/dev/null || fail "the provider did not start"
connected() { ctl hosts -o json 2>/dev/null | grep -c '"connected": *true' || true; }
for _ in $(seq 900); do [ "$(connected)" = 2 ] && break; sleep 0.1; done
[ "$(connected)" = 2 ] || fail "both hosts did not connect: $(ctl hosts 2>&1)"
say "provider up on $addr, zone $zone of two hosts ($cpus CPUs each, cpu overcommit $cpu_oc):"
ctl hosts | sed 's/^/    /'

# field ID NAME: one row of `libvirtctl get` ("-" is empty).
field() {
	local val
	val=$(ctl get "$1" 2>/dev/null | sed -n "s/^$2 \{2,\}//p" | head -n 1) || true
	[ "$val" = - ] && val=
	echo "$val"
}
ref() { field "$1" host | awk '{print $2}'; }
host_of() { ref "$1" | cut -d/ -f2; }
# wait_state ID STATE...: until the machine is in one of the states.
wait_state() {
	local id=$1 s
	shift
	for _ in $(seq 1800); do
		s=$(field "$id" state)
		for want in "$@"; do [ "$s" = "$want" ] && return 0; done
		sleep 0.1
	done
	fail "$id stuck in $s, waiting for $*"
}
create() { # ID: Create, wait for IDLE, say where it went and how long it took
	local s
	s=$(date +%s.%N)
	ctl create "$1" >/dev/null || fail "Create $1 refused"
	wait_state "$1" IDLE FAILED
	[ "$(field "$1" state)" = IDLE ] || fail "$1 went FAILED: $(field "$1" 'last error')"
	say "  $1 → IDLE in $(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2fs", b-a}') on host $(host_of "$1") (ref $(ref "$1"))"
}

mapfile -t ids < <(ctl list --state SPECULATIVE | awk 'NR>1{print $1}')
[ "${#ids[@]}" -ge 5 ] || fail "want 5 SPECULATIVE machines, have ${#ids[@]}"

say "1. placement (spread): Create ${ids[0]} and ${ids[1]} at once"
s=$(date +%s.%N)
ctl create "${ids[0]}" >/dev/null &
c0=$!
ctl create "${ids[1]}" >/dev/null &
c1=$!
wait "$c0" || fail "Create ${ids[0]} refused"
wait "$c1" || fail "Create ${ids[1]} refused"
wait_state "${ids[0]}" IDLE FAILED
wait_state "${ids[1]}" IDLE FAILED
say "  both IDLE after $(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2fs", b-a}')"
for id in "${ids[0]}" "${ids[1]}"; do say "  $id on host $(host_of "$id") (ref $(ref "$id"))"; done
[ "$(host_of "${ids[0]}")" != "$(host_of "${ids[1]}")" ] || fail "both went to the same host"
for h in system session; do
	uri=$BIGFLEET_LIBVIRT_URI
	[ "$h" = session ] && uri=$BIGFLEET_HOST2_URI
	say "  virsh on $h: $(virsh -q -c "$uri" list --name | grep "^bf-$name-" | tr '\n' ' ')"
done

say "2. cordon host session (admin write), then Create ${ids[2]}"
timed "cordon" ctl cordon session --reason "demo: maintenance"
create "${ids[2]}"
[ "$(host_of "${ids[2]}")" = system ] || fail "${ids[2]} went to cordoned host $(host_of "${ids[2]}")"
timed "uncordon" ctl uncordon session

say "3. live-migrate ${ids[2]} to host session (admin write) while it runs"
timed "migrate" ctl migrate "${ids[2]}" --to session
[ "$(host_of "${ids[2]}")" = session ] || fail "${ids[2]} is on $(host_of "${ids[2]}") after the migration"
virsh -q -c "$BIGFLEET_HOST2_URI" list --name | grep -qx "$(ref "${ids[2]}" | cut -d/ -f3)" ||
	fail "virsh on session does not list ${ids[2]}'s domain"
say "  ${ids[2]} now on host session (ref $(ref "${ids[2]}")), running there (virsh)"

say "4. fill the zone: Create ${ids[3]} (the room left is on system now)"
create "${ids[3]}"
say "   the zone is full: Create ${ids[4]}"
s=$(date +%s.%N)
ctl create "${ids[4]}" >/dev/null || fail "Create ${ids[4]} refused"
wait_state "${ids[4]}" FAILED IDLE
[ "$(field "${ids[4]}" state)" = FAILED ] || fail "${ids[4]} found room on $(host_of "${ids[4]}")"
say "  ${ids[4]} → FAILED after $(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2fs", b-a}')"
say "  last_error: $(field "${ids[4]}" 'last error')"

say "cleaning up: Delete the four machines, release the FAILED one"
s=$(date +%s.%N)
for id in "${ids[@]:0:4}"; do ctl delete "$id" >/dev/null; done
for id in "${ids[@]:0:4}"; do wait_state "$id" SPECULATIVE; done
ctl release "${ids[4]}" >/dev/null || true
say "  deleted in $(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2fs", b-a}')"
say "demo-pool passed: spread across two real hosts, cordon, live migration, full zone"
