# Sourced by scripts/libvirt-env.sh: prepares /dev/kvm the way udev does on a
# normal host, and decides the accelerator by proof, not by what libvirt lists.
#
# Four kinds of host (docs/test-guest.md#accelerator): no /dev/kvm; a
# /dev/kvm the QEMU user cannot open (no udev: root-only, no kvm group); a
# /dev/kvm that opens but cannot boot a guest (nested virtualization without
# vmx, or a PVM-only KVM); working KVM. libvirt lists kvm on the middle two,
# so only a real boot tells them apart: the verdict is kvm only when the
# test guest, booted once under <domain type='kvm'>, answers guest-ping
# within BIGFLEET_ACCEL_WAIT seconds. Uses log, die, now, since, virsh_,
# lock state ($STATE) and $BOOT_DIR from libvirt-env.sh.

KVM_CHANGED=0
ACCEL_WAIT=${BIGFLEET_ACCEL_WAIT:-45}
PROBE_DOM=bf-accel-probe

# kvm_state is what the accelerator depends on: the node, its owner and
# mode, and the QEMU user's groups.
kvm_state() {
	if [ -e /dev/kvm ]; then
		echo "$(stat -c '%F %t:%T %U:%G %a' /dev/kvm) libvirt-qemu=$(id -nG libvirt-qemu 2>/dev/null | tr ' ' ,)"
	else
		echo "no /dev/kvm"
	fi
}

# prepare_kvm does what udev's rule does on a normal host: group kvm, mode
# 0660, and the QEMU user in the group. Sets KVM_CHANGED=1 when it changed
# anything (libvirt's capability cache is then stale).
prepare_kvm() {
	[ -e /dev/kvm ] || return 0
	if [ "${BIGFLEET_KVM_PREPARE:-1}" = 0 ]; then
		log "BIGFLEET_KVM_PREPARE=0: /dev/kvm left as found ($(kvm_state))"
		return 0
	fi
	if [ ! -c /dev/kvm ]; then
		log "WARNING: /dev/kvm is not a character device; left alone"
		return 0
	fi
	local before
	before=$(kvm_state)
	if ! getent group kvm >/dev/null; then
		groupadd --system kvm
		log "created system group kvm"
	fi
	if ! id -nG libvirt-qemu | tr ' ' '\n' | grep -qx kvm; then
		usermod -aG kvm libvirt-qemu
		log "added libvirt-qemu to group kvm"
	fi
	chgrp kvm /dev/kvm
	chmod 0660 /dev/kvm
	if [ "$before" != "$(kvm_state)" ]; then
		KVM_CHANGED=1
		log "/dev/kvm prepared as udev would: $before → $(kvm_state)"
	fi
}

# refresh_libvirtd: /dev/kvm changed, so libvirt's cached QEMU capabilities
# are stale. Clear them; restart libvirtd if this script started it
# (start_daemons then starts it again), else say what to do.
refresh_libvirtd() {
	rm -rf "${CAPS_CACHE:?}"/*
	pid_alive /run/libvirtd.pid || return 0
	local pid
	pid=$(cat /run/libvirtd.pid)
	if [ "$(cat "$STATE/libvirtd.started" 2>/dev/null)" = "$pid" ] &&
		[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = libvirtd ]; then
		log "restarting libvirtd (pid $pid) so it re-reads /dev/kvm"
		stop_pid libvirtd "$pid" || die "libvirtd (pid $pid) does not stop"
		rm -f "$STATE/libvirtd.started"
	else
		log "WARNING: libvirtd (pid $pid) was not started by this script; restart it" \
			"(scripts/libvirt-env.sh restart-libvirtd) so it re-reads /dev/kvm"
	fi
}

# accel_key: a verdict holds while the host kernel, /dev/kvm, libvirt, QEMU
# and the test guest stay the same.
accel_key() {
	{
		uname -r
		kvm_state
		libvirtd --version
		qemu-system-x86_64 --version | head -n 1
		stat -c '%n %s %Y' "$BOOT_DIR/vmlinuz" "$BOOT_DIR/initrd.img"
		echo "wait=$ACCEL_WAIT"
	} 2>&1 | sha256sum | cut -c1-16
}

# probe_accel sets ACCEL ('kvm' or 'tcg (why)') and DOMAIN_TYPE, from the
# cached verdict when its key still holds.
probe_accel() {
	local cache
	cache=$STATE/accel.$(accel_key)
	if [ -s "$cache" ] && [ "${BIGFLEET_ACCEL_REPROBE:-0}" != 1 ]; then
		ACCEL=$(cat "$cache")
		log "accelerator verdict from $cache"
	else
		ACCEL=$(decide_accel)
		rm -f "$STATE"/accel.*
		echo "$ACCEL" >"$cache"
	fi
	case "$ACCEL" in
	kvm) DOMAIN_TYPE=kvm ;;
	*) DOMAIN_TYPE=qemu ;;
	esac
}

# one_line keeps the last line of an error, without quotes (the verdict goes
# into the env file in single quotes).
one_line() { tr -d "'" | sed '/^[[:space:]]*$/d' | tail -n 1 | cut -c1-200; }

decide_accel() {
	[ -e /dev/kvm ] || { echo "tcg (no /dev/kvm)"; return; }
	[ -c /dev/kvm ] || { echo "tcg (/dev/kvm is not a character device)"; return; }
	local err
	# What QEMU will do: open it read-write as the QEMU user.
	if ! err=$(runuser -u libvirt-qemu -- sh -c 'exec 3<>/dev/kvm' 2>&1); then
		echo "tcg (/dev/kvm not usable by libvirt-qemu: $(sed 's/.*: //' <<<"$err" | one_line))"
		return
	fi
	boot_probe
}

probe_destroy() { virsh_ destroy "$PROBE_DOM" >/dev/null 2>&1 || true; }

# boot_probe boots the test guest as a transient kvm domain shaped like the
# provider's (direct kernel boot, agent channel; no disk or NIC needed) and
# waits for the agent. The domain is destroyed whatever happens.
boot_probe() {
	local xml err t0 i
	trap probe_destroy EXIT # runs in $(...): a subshell of its own
	probe_destroy
	xml=$(mktemp)
	cat >"$xml" <<XML
<domain type='kvm'>
  <name>$PROBE_DOM</name>
  <memory unit='MiB'>256</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64'>hvm</type>
    <kernel>$BOOT_DIR/vmlinuz</kernel>
    <initrd>$BOOT_DIR/initrd.img</initrd>
    <cmdline>$CMDLINE</cmdline>
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_crash>destroy</on_crash>
  <devices>
    <serial type='pty'>
      <log file='/var/log/libvirt/qemu/$PROBE_DOM-console.log' append='off'/>
      <target port='0'/>
    </serial>
    <console type='pty'><target type='serial' port='0'/></console>
    <channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
  </devices>
</domain>
XML
	t0=$(now)
	if ! err=$(virsh_ create "$xml" 2>&1 >/dev/null); then
		rm -f "$xml"
		probe_destroy
		echo "tcg (kvm guest did not start: $(one_line <<<"$err"))"
		return
	fi
	rm -f "$xml"
	log "boot probe: $PROBE_DOM started under kvm in $(since "$t0"); waiting up to ${ACCEL_WAIT}s for its agent"
	for i in $(seq $((ACCEL_WAIT * 2))); do
		if timeout 5 virsh -q -c "$URI" qemu-agent-command "$PROBE_DOM" --timeout 2 \
			'{"execute":"guest-ping"}' >/dev/null 2>&1; then
			log "boot probe: the kvm guest answered guest-ping $(since "$t0") after start"
			probe_destroy
			echo kvm
			return
		fi
		if ! virsh_ domstate "$PROBE_DOM" 2>/dev/null | grep -qx running; then
			echo "tcg (kvm guest stopped during boot: $(tail -n 5 "/var/log/libvirt/qemu/$PROBE_DOM.log" 2>/dev/null | one_line))"
			probe_destroy
			return
		fi
		# the deadline is wall time: a hung virsh call must not stretch it
		awk -v a="$t0" -v b="$(now)" -v w="$ACCEL_WAIT" 'BEGIN{exit !(b-a > w)}' && break
		sleep 0.5
	done
	log "boot probe: no answer; console: $(tail -c 300 "/var/log/libvirt/qemu/$PROBE_DOM-console.log" 2>/dev/null | tr -d '\r' | one_line)"
	probe_destroy
	echo "tcg (kvm guest did not answer the agent within ${ACCEL_WAIT}s)"
}
