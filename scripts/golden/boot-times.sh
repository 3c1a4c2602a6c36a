#!/bin/bash
# Boot-to-agent times of a golden image under BIOS, UEFI and UEFI with
# Secure Boot (OVMF from Debian's ovmf, Microsoft keys enrolled, so Debian's
# signed shim → grub → kernel chain is what boots). Plain QEMU, no libvirt,
# a throw-away overlay (-snapshot): measures firmware + grub + kernel +
# systemd until qemu-ga answers guest-ping on its virtio-serial port.
#
# Usage: scripts/golden/boot-times.sh IMAGE [bios uefi uefi-secure]
# Env:   BIGFLEET_ACCEL=kvm|tcg (default tcg),
#        BIGFLEET_BOOT_WAIT seconds per boot (default 300)
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

ping_agent() {
	# guest-sync with a fresh id: a reply to an earlier attempt the agent
	# read late must not count.
	local id=$RANDOM$RANDOM
	{ echo "{\"execute\":\"guest-sync\",\"arguments\":{\"id\":$id}}"; sleep 2; } |
		timeout 4 socat - "UNIX-CONNECT:$work/qga.sock" 2>/dev/null | grep -q "\"return\": *$id"
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
		-nic user,model=virtio-net-pci >"$work/$mode.qemu" 2>&1 &
	pid=$!
	ok=0
	while kill -0 "$pid" 2>/dev/null; do
		if [ -S "$work/qga.sock" ] && ping_agent; then ok=1; break; fi
		awk -v a="$t0" -v b="$(date +%s.%N)" -v w="$wait_s" 'BEGIN{exit !(b-a > w)}' && break
		sleep 1
	done
	t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
	sb=
	if [ "$ok" = 1 ] && [ "$mode" = uefi-secure ]; then
		grep -aq 'Secure boot enabled' "$work/$mode.serial" && sb=" (kernel: Secure boot enabled)" || sb=" (kernel did not log 'Secure boot enabled')"
	fi
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=
	if [ "$ok" = 1 ]; then
		echo "boot-to-agent $mode ($accel): ${t}s$sb"
	else
		echo "boot-to-agent $mode ($accel): no answer within ${t}s; serial tail:" >&2
		tail -n 15 "$work/$mode.serial" >&2
		exit 1
	fi
done
