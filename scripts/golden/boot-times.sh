#!/bin/bash
# Boot-to-agent times of a golden image under BIOS, UEFI and UEFI with
# Secure Boot (OVMF from Debian's ovmf, Microsoft keys enrolled, so Debian's
# signed shim → grub → kernel chain is what boots). Plain QEMU, no libvirt,
# a throw-away overlay (-snapshot): measures firmware + grub + kernel +
# systemd until qemu-ga answers guest-ping on its virtio-serial port.
#
# Then boot-to-booted: until the image says its boot is complete, as the
# provider asks it (/opt/bigfleet/booted through guest-exec, polled; without
# the hook `systemctl is-system-running`).
#
# Usage: scripts/golden/boot-times.sh IMAGE [bios uefi uefi-secure]
# Env:   BIGFLEET_ACCEL=kvm|tcg (default tcg),
#        BIGFLEET_BOOT_WAIT seconds per boot (default 300)
#        BIGFLEET_BOOT_NET=dhcp|nodhcp  the NIC: QEMU's user network with its
#                          DHCP server (default), or a NIC with no peer and so
#                          no DHCP (the provider's isolated test bridge)
#        BIGFLEET_BOOT_SEED=FILE  a cloud-init user-data file served on a NoCloud
#                          seed (label cidata, a read-only virtio disk), as
#                          the provider's --base-user-data does
#        BIGFLEET_BOOT_ANALYZE=1  once booted, print systemd-analyze (time,
#                          blame, critical-chain) from inside the guest
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
image=${1:?usage: boot-times.sh IMAGE [modes...]}
shift
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(bios uefi uefi-secure)
"$here/../ensure-packages.sh" qemu-system-x86 ovmf socat
# tcg unless told: a /dev/kvm that opens may still not run guests (the env
# script's probe, scripts/libvirt-env-kvm.sh, is the judge of that).
accel=${BIGFLEET_ACCEL:-tcg}
wait_s=${BIGFLEET_BOOT_WAIT:-300}
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
nic=(-nic user,model=virtio-net-pci)
seed=()
if [ -n "${BIGFLEET_BOOT_SEED:-}" ]; then
	mkdir "$work/seed"
	cp "$BIGFLEET_BOOT_SEED" "$work/seed/user-data"
	printf 'instance-id: boot-times\nlocal-hostname: boot-times\n' >"$work/seed/meta-data"
	(cd "$work/seed" && genisoimage -quiet -output ../seed.iso -volid cidata -joliet -rock user-data meta-data)
	seed=(-drive file="$work/seed.iso",if=virtio,format=raw,readonly=on)
fi
[ "${BIGFLEET_BOOT_NET:-dhcp}" = nodhcp ] && nic=(-netdev hubport,id=n0,hubid=0 -device virtio-net-pci,netdev=n0)

ping_agent() {
	# guest-sync with a fresh id: a reply to an earlier attempt the agent
	# read late must not count.
	local id=$RANDOM$RANDOM
	{ echo "{\"execute\":\"guest-sync\",\"arguments\":{\"id\":$id}}"; sleep 2; } |
		timeout 4 socat - "UNIX-CONNECT:$work/qga.sock" 2>/dev/null | grep -q "\"return\": *$id"
}

# qga JSON: one agent command on a fresh connection, after a guest-sync with
# a fresh id (so a late reply to an earlier command is never taken); prints
# the command's reply line.
qga() {
	local id=$RANDOM$RANDOM
	{ echo "{\"execute\":\"guest-sync\",\"arguments\":{\"id\":$id}}"; sleep 0.5; echo "$1"; sleep 1.5; } |
		timeout 4 socat - "UNIX-CONNECT:$work/qga.sock" 2>/dev/null |
		grep -v "\"return\": *$id}" | grep -m1 -E '"(return|error)"'
}
# gexec PATH [ARG...]: runs a guest program through guest-exec and waits for
# it (up to ~20 s); sets EXIT (-1: could not start it, e.g. no such file) and OUT.
gexec() {
	local path=$1 args="" a r gpid i
	shift
	for a in "$@"; do args="$args${args:+,}\"$a\""; done
	EXIT=-1 OUT=
	r=$(qga "{\"execute\":\"guest-exec\",\"arguments\":{\"path\":\"$path\",\"arg\":[$args],\"capture-output\":true}}")
	gpid=$(sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' <<<"$r")
	[ -n "$gpid" ] || return 0
	for i in $(seq 10); do
		r=$(qga "{\"execute\":\"guest-exec-status\",\"arguments\":{\"pid\":$gpid}}")
		grep -qE '"exited": *true' <<<"$r" && break
	done
	EXIT=$(sed -n 's/.*"exitcode": *\([0-9]*\).*/\1/p' <<<"$r")
	OUT=$(sed -n 's/.*"out-data": *"\([^"]*\)".*/\1/p' <<<"$r" | base64 -d 2>/dev/null)
	EXIT=${EXIT:--1}
}
# booted: 0 once the guest's boot is complete, by the provider's rule (the
# /opt/bigfleet/booted hook, else systemctl is-system-running); WHY says
# what it waits for.
booted() {
	gexec /opt/bigfleet/booted
	if [ "$EXIT" = -1 ] || [ "$EXIT" = 126 ] || [ "$EXIT" = 127 ]; then
		gexec /bin/systemctl is-system-running
		WHY=$OUT
		case "$OUT" in running* | degraded*) return 0 ;; esac
		return 1
	fi
	WHY=$(printf '%s\n' "$OUT" | sed '/^$/d' | tail -n1)
	[ "$EXIT" = 0 ]
}

for mode in "${modes[@]}"; do
	fw=()
	machine=q35
	case "$mode" in
	bios) ;;
	uefi)
		cp /usr/share/OVMF/OVMF_VARS_4M.fd "$work/vars.fd"
		fw=(-drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd
			-drive if=pflash,format=raw,unit=1,file="$work/vars.fd") ;;
	uefi-secure)
		cp /usr/share/OVMF/OVMF_VARS_4M.ms.fd "$work/vars.fd"
		machine=q35,smm=on
		fw=(-global driver=cfi.pflash01,property=secure,value=on
			-drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.secboot.fd
			-drive if=pflash,format=raw,unit=1,file="$work/vars.fd") ;;
	*) echo "boot-times: unknown mode $mode" >&2; exit 2 ;;
	esac
	rm -f "$work/qga.sock"
	t0=$(date +%s.%N)
	qemu-system-x86_64 -machine "$machine,accel=$accel" -m 1024 -smp 1 -snapshot "${fw[@]}" \
		-drive file="$image",if=virtio,format=qcow2 -display none -monitor none \
		-serial file:"$work/$mode.serial" \
		-chardev socket,path="$work/qga.sock",server=on,wait=off,id=qga0 \
		-device virtio-serial -device virtserialport,chardev=qga0,name=org.qemu.guest_agent.0 \
		"${seed[@]}" "${nic[@]}" >"$work/$mode.qemu" 2>&1 &
	pid=$!
	ok=0
	while kill -0 "$pid" 2>/dev/null; do
		if [ -S "$work/qga.sock" ] && ping_agent; then ok=1; break; fi
		awk -v a="$t0" -v b="$(date +%s.%N)" -v w="$wait_s" 'BEGIN{exit !(b-a > w)}' && break
		sleep 1
	done
	t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
	tb= WHY=
	if [ "$ok" = 1 ]; then
		while ! booted; do
			awk -v a="$t0" -v b="$(date +%s.%N)" -v w="$wait_s" 'BEGIN{exit !(b-a > w)}' && break
			sleep 1
		done
		booted && tb=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
		if [ "${BIGFLEET_BOOT_ANALYZE:-0}" = 1 ]; then
			for c in "" "blame" "critical-chain"; do
				gexec /usr/bin/systemd-analyze $c --no-pager
				echo "--- systemd-analyze $c ($mode)"
				printf '%s\n' "$OUT" | head -n 25
			done
		fi
	fi
	sb=
	if [ "$ok" = 1 ] && [ "$mode" = uefi-secure ]; then
		grep -aq 'Secure boot enabled' "$work/$mode.serial" && sb=" (kernel: Secure boot enabled)" || sb=" (kernel did not log 'Secure boot enabled')"
	fi
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=
	if [ "$ok" = 1 ]; then
		echo "boot-to-agent $mode ($accel): ${t}s$sb"
		if [ -n "$tb" ]; then
			echo "boot-to-booted $mode ($accel, ${BIGFLEET_BOOT_NET:-dhcp}${seed:+, seed}): ${tb}s"
		else
			echo "boot-to-booted $mode ($accel, ${BIGFLEET_BOOT_NET:-dhcp}): not booted within ${wait_s}s (${WHY:-no answer})"
		fi
	else
		echo "boot-to-agent $mode ($accel): no answer within ${t}s; serial tail:" >&2
		tail -n 15 "$work/$mode.serial" >&2
		exit 1
	fi
done
