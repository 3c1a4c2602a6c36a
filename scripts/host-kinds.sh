#!/bin/bash
# Proves the provider on every kind of KVM host this machine can play
# (docs/test-guest.md#accelerator): for each kind it sets the host up,
# checks the accelerator scripts/libvirt-env.sh picks, runs
# `make test-integration` and `make demo`, and restores the host exactly as
# found: /dev/kvm's existence, owner, group and mode, the kvm group and
# libvirt-qemu's membership, libvirt's QEMU capability cache, the env file;
# libvirtd is left running.
#
#   scripts/host-kinds.sh [KIND...]     (make test-host-kinds runs all)
#
# Kinds:
#   no-kvm        /dev/kvm hidden                       → tcg (no /dev/kvm)
#   kvm-unusable  /dev/kvm root-only 0600 (mknod where   → tcg (/dev/kvm not usable ...);
#                 absent), left so (BIGFLEET_KVM_PREPARE=0)   the provider runs with
#                                                       --domain-type=auto: its own fallback
#   kvm-prepared  the real /dev/kvm as found, prepared  → kvm where a guest boots,
#                 like udev by the env script              tcg (kvm guest did not ...) where
#                 (skipped where there is no KVM)          it opens but cannot boot
# Needs root; changes /dev/kvm and restarts libvirtd: on a shared machine run it
# under the real-libvirt lock.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "host-kinds: must run as root" >&2; exit 1; }

STATE=${BIGFLEET_ENV_STATE:-/run/bigfleet-libvirt-env}
HIDE=/run/bigfleet-kvm-hidden
CAPS=/var/cache/libvirt/qemu/capabilities
MAKE=${MAKE:-make}
KINDS=("$@")
[ ${#KINDS[@]} -gt 0 ] || KINDS=(no-kvm kvm-unusable kvm-prepared)
SAVE=$(mktemp -d /tmp/bf-host-kinds.XXXXXX)

log() { echo "host-kinds: $*" >&2; }
now() { date +%s; }
member_kvm() { id -nG libvirt-qemu 2>/dev/null | tr ' ' '\n' | grep -qx kvm; }

# ---- the host as found ------------------------------------------------------
record() {
	if [ -e /dev/kvm ]; then
		KVM_WAS=$(stat -c '%u:%g %a %t %T' /dev/kvm) # owner, mode, major/minor (hex)
	else
		KVM_WAS=absent
	fi
	GROUP_WAS=no
	getent group kvm >/dev/null && GROUP_WAS=yes
	MEMBER_WAS=no
	member_kvm && MEMBER_WAS=yes
	mkdir -p "$SAVE/caps" "$SAVE/state"
	cp -a "$CAPS/." "$SAVE/caps/" 2>/dev/null || true
	cp -a "$STATE"/env "$STATE"/accel.* "$SAVE/state/" 2>/dev/null || true
	REAL_KVM=$(go run ./scripts/kvmprobe 2>&1) && HAS_KVM=yes || HAS_KVM=no
	log "found: /dev/kvm $KVM_WAS, group kvm $GROUP_WAS, libvirt-qemu in kvm $MEMBER_WAS; $REAL_KVM"
}

# restore_kvm puts /dev/kvm and the kvm group back as found.
restore_kvm() {
	local owner mode major minor
	if [ "$KVM_WAS" = absent ]; then
		[ -c /dev/kvm ] && rm -f /dev/kvm # ours: made by kvm-unusable
	else
		read -r owner mode major minor <<<"$KVM_WAS"
		if [ ! -e /dev/kvm ]; then
			if [ -e "$HIDE/kvm" ]; then mv "$HIDE/kvm" /dev/kvm; else mknod /dev/kvm c $((16#$major)) $((16#$minor)); fi
		fi
		chown "$owner" /dev/kvm
		chmod "$mode" /dev/kvm
	fi
	rmdir "$HIDE" 2>/dev/null || true
	if [ "$GROUP_WAS" = no ]; then
		getent group kvm >/dev/null && groupdel kvm
	elif [ "$MEMBER_WAS" = no ] && member_kvm; then
		gpasswd -d libvirt-qemu kvm >/dev/null
	fi
	return 0
}

restart_libvirtd() { scripts/libvirt-env.sh restart-libvirtd "$@" 2>&1 | sed 's/^/  /' >&2; }

# restore_all: the whole host as found, libvirtd running on the saved cache.
restore_all() {
	restore_kvm
	rm -rf "${CAPS:?}"/*
	cp -a "$SAVE/caps/." "$CAPS/" 2>/dev/null || true
	rm -f "$STATE"/env "$STATE"/accel.*
	cp -a "$SAVE/state/." "$STATE/" 2>/dev/null || true
	restart_libvirtd keep-cache
}

on_exit() {
	local rc=$?
	log "restoring the host as found"
	restore_all || { log "ERROR: restoring the host failed"; rc=1; }
	log "now: /dev/kvm $( [ -e /dev/kvm ] && stat -c '%U:%G %a' /dev/kvm || echo absent), group kvm $(getent group kvm >/dev/null && echo yes || echo no)"
	rm -rf "$SAVE"
	exit "$rc"
}

# ---- the kinds: setup_<kind> prepares the host and sets WANT (a regex the
# accelerator line must match); exit status 2 = this machine cannot play it.
setup_no-kvm() {
	if [ -e /dev/kvm ]; then
		mkdir -p "$HIDE"
		mv /dev/kvm "$HIDE/kvm"
	fi
	WANT='^tcg \(no /dev/kvm\)$'
}

setup_kvm-unusable() {
	[ -e /dev/kvm ] || mknod /dev/kvm c 10 232
	chown root:root /dev/kvm
	chmod 0600 /dev/kvm
	export BIGFLEET_KVM_PREPARE=0 BIGFLEET_DOMAIN_TYPE_OVERRIDE=auto
	# libvirt re-probes QEMU on nearly every call on such a host (seconds
	# each), so the whole suite would take ~25 min here: this kind runs the
	# tests that drive the provider end to end through its own kvm → qemu
	# fallback (the binary over gRPC, a QEMU that dies at start: FAILED, not
	# taken for an unusable KVM) and the demo; the backend's TestLifecycle
	# (2 min here) repeats what the binary's run covers. Override with
	# INTEGRATION_RUN= for all.
	export INTEGRATION_RUN=${INTEGRATION_RUN-'^(TestBinaryOverGRPC|TestWaitStopsAtFailed)$'}
	WANT='^tcg \(/dev/kvm not usable by libvirt-qemu: .+\)$'
}

setup_kvm-prepared() {
	if [ "$HAS_KVM" != yes ]; then
		SKIP="this machine has no KVM ($REAL_KVM)"
		return 0
	fi
	WANT='^(kvm|tcg \(kvm guest (did not answer|did not start|stopped).*\))$'
}

# step NAME CMD...: runs and times one step; records "NAME pass|FAIL (Ns)".
step() {
	local name=$1 t0 rc=0
	shift
	t0=$(now)
	echo "--- $KIND: $name"
	"$@" || rc=$?
	RESULT="$RESULT, $name $([ $rc = 0 ] && echo pass || echo FAIL) ($(($(now) - t0))s)"
	[ $rc = 0 ] || FAILED=1
	return 0
}

env_up() {
	local err=$SAVE/$KIND.up.err
	BIGFLEET_ACCEL_REPROBE=1 scripts/libvirt-env.sh up >/dev/null 2>"$err" || { cat "$err" >&2; return 1; }
	sed 's/^/  /' "$err" >&2
	ACCEL=$(sed -n 's/^accelerator: //p' "$err")
	echo "accelerator: $ACCEL"
	if ! grep -Eq "$WANT" <<<"$ACCEL"; then
		echo "host-kinds: $KIND: accelerator '$ACCEL' does not match /$WANT/" >&2
		return 1
	fi
}

demo() {
	local out=$SAVE/$KIND.demo
	"$MAKE" --no-print-directory demo 2>&1 | tee "$out"
	local rc=${PIPESTATUS[0]}
	# the demo's first word is the accelerator it ran on
	grep -qF "accelerator: $ACCEL" "$out" || { echo "host-kinds: the demo did not print 'accelerator: $ACCEL'" >&2; return 1; }
	return "$rc"
}

# subset_if_covered: a kind whose guests end up on an accelerator that an
# earlier kind of this run already ran the whole suite on (kvm-prepared on a
# machine whose KVM opens but cannot boot a guest: TCG again, as in no-kvm)
# would repeat that run test for test; what is its own is the env script's
# verdict (checked by env up) and the provider on it end to end, so it runs
# the binary over gRPC and the demo (about 6 min less on a 2-core TCG
# machine, which keeps make test within its hour). INTEGRATION_RUN set by
# the caller or the kind wins.
subset_if_covered() {
	[ -z "${INTEGRATION_RUN+set}" ] && [ -e "$SAVE/whole-suite.${ACCEL%% *}" ] || return 0
	export INTEGRATION_RUN='^TestBinaryOverGRPC$'
	echo "host-kinds: $KIND: the whole suite already ran on ${ACCEL%% *} in this run; this kind runs $INTEGRATION_RUN and the demo"
}

run_kind() {
	KIND=$1 SKIP= WANT= ACCEL= RESULT= FAILED=0
	local t0
	t0=$(now)
	echo
	echo "=================== host kind: $KIND ==================="
	restore_kvm
	if ! declare -F "setup_$KIND" >/dev/null; then
		SUMMARY+=("$KIND: unknown kind")
		ANY_FAILED=1
		return 0
	fi
	"setup_$KIND"
	if [ -n "$SKIP" ]; then
		echo "host kind $KIND: SKIPPED: $SKIP"
		SUMMARY+=("$KIND: skipped: $SKIP")
		return 0
	fi
	restart_libvirtd
	step "env up" env_up
	if [ "$FAILED" = 0 ]; then
		subset_if_covered
		step "make test-integration" "$MAKE" --no-print-directory test-integration
		# the whole suite ran on this accelerator (whatever its result)
		[ -n "${INTEGRATION_RUN:-}" ] || touch "$SAVE/whole-suite.${ACCEL%% *}"
		# one result file per kind, so make test's closing line counts them all
		[ -f out/gotest-test-integration.json ] &&
			mv out/gotest-test-integration.json "out/gotest-test-integration-$KIND.json"
		step "make demo" demo
	fi
	local verdict=PASS
	[ "$FAILED" = 0 ] || { verdict=FAIL; ANY_FAILED=1; }
	SUMMARY+=("$KIND: $verdict in $(($(now) - t0))s; accelerator: ${ACCEL:-?}${RESULT}")
	echo "host kind $KIND: $verdict in $(($(now) - t0))s"
}

record
trap on_exit EXIT
trap 'exit 130' INT TERM
SUMMARY=()
ANY_FAILED=0
T0=$(now)
for k in "${KINDS[@]}"; do
	# each kind in a subshell: its exports (BIGFLEET_KVM_PREPARE=0, ...) end with it
	if ! (
		SUMMARY=()
		run_kind "$k"
		printf '%s\n' "${SUMMARY[@]}" >"$SAVE/summary.$k"
		exit "$ANY_FAILED"
	); then ANY_FAILED=1; fi
	[ -s "$SAVE/summary.$k" ] && mapfile -t -O "${#SUMMARY[@]}" SUMMARY <"$SAVE/summary.$k"
	# between kinds too: every kind starts from the host as found (after the
	# last one, on_exit does it)
	[ "$k" = "${KINDS[-1]}" ] || restore_all
done
echo
echo "=================== host kinds: $(($(now) - T0))s ==================="
printf '  %s\n' "${SUMMARY[@]}"
exit "$ANY_FAILED"
