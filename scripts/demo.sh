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
[ -r "$ENV_FILE" ] || scripts/libvirt-env.sh up >/dev/null
# shellcheck disable=SC1090
source "$ENV_FILE"

work=$(mktemp -d)
addr=127.0.0.1:${DEMO_PORT:-9400}
ctl() { bin/libvirtctl --addr "$addr" "$@"; }
t0=$(date +%s.%N)
stamp() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%7.2fs", b-a}'; }
say() { echo "[$(stamp)] $*"; }
fail() { echo "demo: FAILED: $*" >&2; tail -n 20 "$work/provider.log" >&2 || true; exit 1; }

cleanup() {
	[ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

bin/libvirt --addr "$addr" --metrics-addr= --provider demo \
	--connect "$BIGFLEET_LIBVIRT_URI" --default-zone local \
	--storage-pool "$BIGFLEET_POOL" --image "$BIGFLEET_IMAGE" --network "$BIGFLEET_NETWORK" \
	--kernel "$BIGFLEET_KERNEL" --initrd "$BIGFLEET_INITRD" --cmdline "$BIGFLEET_CMDLINE" \
	--seed-count 2 --state "$work/state.db" --reconcile-interval 30s \
	--create-timeout 3m --configure-timeout 3m --drain-timeout 2m --delete-timeout 2m \
	>"$work/provider.out" 2>"$work/provider.log" &
pid=$!
for _ in $(seq 100); do ctl list >/dev/null 2>&1 && break; sleep 0.1; done
ctl list >/dev/null || fail "the provider did not start"
say "provider up on $addr (libvirt $BIGFLEET_LIBVIRT_URI)"

id=$(ctl list --state SPECULATIVE -o json | grep -o '"id": *"[^"]*"' | awk 'NR==1' | sed 's/.*"\([^"]*\)"$/\1/')
[ -n "$id" ] || fail "no SPECULATIVE machine to use"

state() { ctl get "$id" -o json | grep -o '"state": *"[^"]*"' | awk 'NR==1' | sed 's/.*"\([^"]*\)"$/\1/; s/^MACHINE_STATE_//'; }

# wait_for TARGET: print every state change with its time until TARGET.
wait_for() {
	local want=$1 last="" s
	for _ in $(seq 1800); do
		s=$(state)
		if [ "$s" != "$last" ]; then say "  $id: $s"; last=$s; fi
		[ "$s" = "$want" ] && return 0
		[ "$s" = FAILED ] && fail "$id went FAILED: $(ctl get "$id" -o json | grep -o '"lastError": *"[^"]*"')"
		sleep 0.1
	done
	fail "$id did not reach $want"
}

say "Create $id"
ctl create "$id" >/dev/null
wait_for IDLE
domain=$(ctl get "$id" -o json | grep -o '"ref": *"[^"]*"' | awk 'NR==1' | sed 's/.*"[^/]*\/\([^"]*\)"$/\1/')
say "  VM is domain $domain"

head -c 65536 /dev/urandom >"$work/blob"
printf '\0binary\0tail' >>"$work/blob"
want=$(sha256sum "$work/blob" | cut -d' ' -f1)
say "Configure $id for cluster demo (blob of $(stat -c %s "$work/blob") bytes, sha256 ${want:0:16}…)"
ctl configure "$id" --cluster demo --blob-file "$work/blob" --metadata owner=demo >/dev/null
wait_for CONFIGURED

# Read the hook's record of the blob from inside the guest, through the agent.
agent() { virsh -q -c "$BIGFLEET_LIBVIRT_URI" qemu-agent-command "$domain" "$1"; }
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
ctl drain "$id" --grace 5 >/dev/null
wait_for IDLE

say "Delete $id"
ctl delete "$id" >/dev/null
wait_for SPECULATIVE
if virsh -q -c "$BIGFLEET_LIBVIRT_URI" list --all --name | grep -x "$domain" >/dev/null; then
	fail "domain $domain still exists after Delete"
fi
say "  domain $domain and its volumes are gone"
say "demo passed: Create → Configure → Drain → Delete on a real QEMU guest"
