#!/bin/bash
# The provider doing its real job: on the local libvirtd (brought up by
# scripts/libvirt-env.sh), one machine goes Create → IDLE → Configure →
# CONFIGURED → Drain → IDLE → Delete → SPECULATIVE, driven by the project's
# own client (bin/libvirtctl). The bootstrap blob's sha256 is checked from
# inside the guest through the guest agent. Exits non-zero, saying which
# step failed, on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ENV_FILE=${BIGFLEET_ENV_FILE:-/run/bigfleet-libvirt-env/env}
# An env file from before the accelerator probe lacks BIGFLEET_ACCEL: redo it.
grep -q '^export BIGFLEET_ACCEL=' "$ENV_FILE" 2>/dev/null || scripts/libvirt-env.sh up >/dev/null
# shellcheck disable=SC1090
source "$ENV_FILE"
# BIGFLEET_DOMAIN_TYPE_OVERRIDE=auto lets the provider choose (host-kinds.sh
# uses it where /dev/kvm is listed but unusable, to exercise the fallback).
domain_type=${BIGFLEET_DOMAIN_TYPE_OVERRIDE:-$BIGFLEET_DOMAIN_TYPE}
echo "accelerator: $BIGFLEET_ACCEL (provider --domain-type=$domain_type)"

# IMAGE=debian12|debian13|path/to.qcow2 (make demo IMAGE=debian12): the golden
# image of scripts/golden/build.sh (built first if needed) instead of the
# initramfs test guest, booted from its own disk (no --kernel), with longer
# budgets for a full distribution's first boot under TCG.
boot=(--kernel "$BIGFLEET_KERNEL" --initrd "$BIGFLEET_INITRD" --cmdline "$BIGFLEET_CMDLINE")
budgets=(--create-timeout 3m --configure-timeout 3m --drain-timeout 2m --delete-timeout 2m)
image=$BIGFLEET_IMAGE
case "${IMAGE:-}" in
"") ;;
debian12 | debian13 | *.qcow2)
	golden=$IMAGE
	if [ "${IMAGE%.qcow2}" = "$IMAGE" ]; then
		golden=$(scripts/golden/build.sh "$IMAGE" | sed -n 's/^IMAGE=//p' | tail -n1)
	fi
	[ -f "$golden" ] || { echo "demo: no golden image ${golden:-for $IMAGE}" >&2; exit 1; }
	image=$(scripts/golden/pool-volume.sh "$BIGFLEET_LIBVIRT_URI" "$BIGFLEET_POOL" "$golden")
	boot=()
	budgets=(--create-timeout 5m --configure-timeout 10m --agent-wait 8m --drain-timeout 3m --delete-timeout 3m)
	echo "image: $golden (volume $image, disk boot)"
	;;
*) echo "demo: IMAGE=$IMAGE: want debian12, debian13 or a .qcow2 path" >&2; exit 2 ;;
esac

work=$(mktemp -d)
addr=127.0.0.1:${DEMO_PORT:-9400}
name=demo # --provider: its domains are bf-demo-*
ctl() { bin/libvirtctl --addr "$addr" "$@"; }
v() { virsh -q -c "$BIGFLEET_LIBVIRT_URI" "$@"; }
t0=$(date +%s.%N)
stamp() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%7.2fs", b-a}'; }
say() { echo "[$(stamp)] $*"; }
# Each lifecycle step's wall time, from the request to the state it ends in
# (as this script sees it, polling every 0.1 s): begin at the request, took
# at the target state. One line per step as it ends, and all of them at the end.
steps=()
begin() { step_t0=$(date +%s.%N); }
took() {
	local s
	s=$(awk -v a="$step_t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')
	say "  STEP $1: ${s}s"
	steps+=("$(printf '%-26s %8ss' "$1" "$s")")
}

# field ID NAME: one row of `libvirtctl get` (FIELD, then VALUE after two or
# more spaces; "-" is empty). The table carries the full last_error.
field() {
	local val
	val=$(ctl get "$1" 2>/dev/null | sed -n "s/^$2 \{2,\}//p" | head -n 1) || true
	[ "$val" = - ] && val=
	echo "$val"
}
state() { field "$id" state; }

# qemu_log_tail: the end of the machine's QEMU log, where QEMU's own reason
# for dying is (e.g. "Could not access KVM kernel module").
qemu_log_tail() {
	local d log
	d=$(field "$id" domain)
	if [ -n "$d" ]; then log=/var/log/libvirt/qemu/$d.log; else
		log=$(ls -t /var/log/libvirt/qemu/bf-$name-*.log 2>/dev/null | grep -v -- -console.log | head -n 1) || true
	fi
	[ -r "$log" ] || return 0
	echo "--- last 20 lines of $log ---"
	tail -n 20 "$log"
}

fail() {
	echo "demo: FAILED: $*" >&2
	[ -n "${id:-}" ] && qemu_log_tail >&2
	echo "--- last 20 lines of the provider's log ---" >&2
	tail -n 20 "$work/provider.log" >&2 || true
	exit 1
}

# settle: back to SPECULATIVE through the provider (drain then delete a
# configured machine), within about a minute. A FAILED machine needs the
# admin API's release, which wants an mTLS admin client: the sweep in
# cleanup removes its VM instead.
settle() {
	local s i
	for i in $(seq 600); do
		s=$(state)
		case "$s" in
		SPECULATIVE) return 0 ;;
		FAILED) return 1 ;;
		IDLE) ctl delete "$id" >/dev/null 2>&1 || true ;;
		CONFIGURED) ctl drain "$id" --grace 0 >/dev/null 2>&1 || true ;;
		"") return 1 ;; # the provider does not answer
		esac
		sleep 0.1
	done
	return 1
}

# cleanup removes every VM the demo made, even when it failed: through the
# provider first, then whatever bf-demo-* domain or volume is left, by hand.
cleanup() {
	local rc=$? d p
	if [ -n "${id:-}" ] && [ -n "${pid:-}" ] && kill -0 "$pid" 2>/dev/null; then
		settle || echo "demo: cleanup: $id did not return to SPECULATIVE through the provider" >&2
	fi
	[ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	for d in $(v list --all --name 2>/dev/null | grep "^bf-$name-" || true); do
		v destroy "$d" >/dev/null 2>&1 || true
		v undefine "$d" --nvram >/dev/null 2>&1 || v undefine "$d" >/dev/null 2>&1 || true
		echo "demo: cleanup: removed leftover domain $d" >&2
	done
	for p in $(v vol-list "$BIGFLEET_POOL" 2>/dev/null | awk '{print $1}' | grep "^bf-$name-" || true); do
		v vol-delete --pool "$BIGFLEET_POOL" "$p" >/dev/null 2>&1 && echo "demo: cleanup: removed leftover volume $p" >&2
	done
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT

bin/libvirt --addr "$addr" --metrics-addr= --provider "$name" \
	--connect "$BIGFLEET_LIBVIRT_URI" --default-zone local --domain-type "$domain_type" \
	--storage-pool "$BIGFLEET_POOL" --image "$image" --network "$BIGFLEET_NETWORK" \
	"${boot[@]}" \
	--seed-count 2 --state "$work/state.db" --reconcile-interval 30s \
	"${budgets[@]}" \
	>"$work/provider.out" 2>"$work/provider.log" &
pid=$!
for _ in $(seq 600); do ctl list >/dev/null 2>&1 && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
ctl list >/dev/null || fail "the provider did not start"
say "provider up on $addr (libvirt $BIGFLEET_LIBVIRT_URI)"

# The API answers before the host is connected (where libvirt re-probes QEMU
# on every call, connecting takes seconds): Create would be refused.
# The column is found by its heading: the table gains columns over time.
host_conn() {
	ctl hosts 2>/dev/null | awk 'NR==1{for(i=1;i<=NF;i++) if($i=="CONNECTED") c=i} c && $1=="local"{print $c}' || true
}
for _ in $(seq 1200); do [ "$(host_conn)" = yes ] && break; sleep 0.1; done
[ "$(host_conn)" = yes ] || fail "host local did not connect within 120s: $(ctl hosts 2>&1 | awk '$1=="local"')"
say "host local connected ($(grep -o 'domain_type[^,}]*' "$work/provider.log" | head -n 1 | tr -d '"' | tr : =))"

id=$(ctl list --state SPECULATIVE | awk 'NR==2{print $1}')
[ -n "$id" ] || fail "no SPECULATIVE machine to use"

# wait_for TARGET: print every state change with its time until TARGET.
wait_for() {
	local want=$1 last="" s
	for _ in $(seq 1800); do
		s=$(state)
		if [ "$s" != "$last" ]; then say "  $id: ${s:-?}"; last=$s; fi
		[ "$s" = "$want" ] && return 0
		[ "$s" = FAILED ] && fail "$id went FAILED: $(field "$id" 'last error')"
		sleep 0.1
	done
	fail "$id did not reach $want"
}

say "Create $id"
begin
ctl create "$id" >/dev/null || fail "Create $id was refused"
wait_for IDLE
took "Create → IDLE"
domain=$(field "$id" domain)
say "  VM is domain $domain"

head -c 65536 /dev/urandom >"$work/blob"
printf '\0binary\0tail' >>"$work/blob"
want=$(sha256sum "$work/blob" | cut -d' ' -f1)
say "Configure $id for cluster demo (blob of $(stat -c %s "$work/blob") bytes, sha256 ${want:0:16}…)"
begin
ctl configure "$id" --cluster demo --blob-file "$work/blob" --metadata owner=demo >/dev/null || fail "Configure $id was refused"
wait_for CONFIGURED
took "Configure → CONFIGURED"

# Read the hook's record of the blob from inside the guest, through the agent.
agent() { v qemu-agent-command "$domain" "$1"; }
gpid=$(agent '{"execute":"guest-exec","arguments":{"path":"/bin/cat","arg":["/run/bigfleet/blob.sha256"],"capture-output":true}}' |
	grep -o '"pid":[0-9]*' | cut -d: -f2)
for _ in $(seq 50); do
	out=$(agent "{\"execute\":\"guest-exec-status\",\"arguments\":{\"pid\":$gpid}}")
	case "$out" in *'"exited":true'*) break ;; esac
	sleep 0.1
done
got=$(echo "$out" | grep -o '"out-data":"[^"]*"' | cut -d'"' -f4 | base64 -d | tr -d ' \n-')
[ "$got" = "$want" ] || fail "blob sha256 inside the guest is '$got', want '$want'"
say "  blob sha256 inside the guest matches"

say "Drain $id (grace 5s)"
begin
ctl drain "$id" --grace 5 >/dev/null || fail "Drain $id was refused"
wait_for IDLE
took "Drain → IDLE"

say "Delete $id"
begin
ctl delete "$id" >/dev/null || fail "Delete $id was refused"
wait_for SPECULATIVE
took "Delete → SPECULATIVE"
if v list --all --name | grep -x "$domain" >/dev/null; then
	fail "domain $domain still exists after Delete"
fi
say "  domain $domain and its volumes are gone"
say "demo passed: Create → Configure → Drain → Delete on a real QEMU guest"
echo "step times (${IMAGE:-test initramfs}, $BIGFLEET_ACCEL):"
printf '  %s\n' "${steps[@]}"
