#!/bin/bash
# Smoke test of the real test environment: boots one tiny guest by hand with
# virsh and drives its qemu-guest-agent the way the provider does.
#
#   scripts/libvirt-env.sh up && scripts/guest/smoke.sh
#
# Env: KEEP=1 keeps the domain (bf-smoke-<pid>) for inspection.
# Prints a timing for each step; exits non-zero on the first failure.
set -euo pipefail

STATE=${BIGFLEET_ENV_STATE:-/run/bigfleet-libvirt-env}
[ -r "$STATE/env" ] || { echo "no $STATE/env: run scripts/libvirt-env.sh up" >&2; exit 1; }
. "$STATE/env"

URI=$BIGFLEET_LIBVIRT_URI
DOM=bf-smoke-$$
VOL=$DOM.qcow2
NOAGENT=$DOM-noagent
KNOBS=$DOM-knobs # booted hook knobs: bigfleet.boot_delay, bigfleet.boot_fail
v() { virsh -q -c "$URI" "$@"; }
now() { date +%s.%N; }
T=$(now)
step() { # print the time since the previous step
	local n
	n=$(now)
	awk -v a="$T" -v b="$n" -v s="$1" 'BEGIN{printf "  %-44s %6.2fs\n", s, b-a}'
	T=$n
}
fail() { echo "FAIL: $*" >&2; exit 1; }

cleanup() {
	local d
	[ "${KEEP:-0}" = 1 ] && { echo "kept $DOM $NOAGENT $KNOBS"; return; }
	for d in "$DOM" "$NOAGENT" "$KNOBS"; do
		v destroy "$d" >/dev/null 2>&1 || true
		v undefine "$d" >/dev/null 2>&1 || true
		v vol-delete --pool "$BIGFLEET_POOL" "$d.qcow2" >/dev/null 2>&1 || true
	done
}
trap cleanup EXIT

# agent JSON: one agent command to $GDOM (default: the main guest)
agent() { v qemu-agent-command "${GDOM:-$DOM}" --timeout 10 "$1"; }
json_num() { sed -n "s/.*\"$1\":\([0-9-]*\).*/\1/p"; }
json_str() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }

# Runs a guest program with argv (no shell) and waits for it: sets EXIT, SIGNAL, OUT, ERR.
gexec() { # path args...
	local path=$1 args="" a pid st i
	shift
	for a in "$@"; do args="$args${args:+,}\"$a\""; done
	pid=$(agent "{\"execute\":\"guest-exec\",\"arguments\":{\"path\":\"$path\",\"arg\":[$args],\"capture-output\":true}}" | json_num pid)
	[ -n "$pid" ] || fail "guest-exec $path gave no pid"
	for i in $(seq 300); do
		st=$(agent "{\"execute\":\"guest-exec-status\",\"arguments\":{\"pid\":$pid}}")
		case "$st" in *'"exited":true'*) break ;; esac
		sleep 0.05
	done
	case "$st" in *'"exited":true'*) ;; *) fail "$path $* did not exit: $st" ;; esac
	EXIT=$(json_num exitcode <<<"$st")
	SIGNAL=$(json_num signal <<<"$st")
	OUT=$(json_str out-data <<<"$st" | base64 -d)
	ERR=$(json_str err-data <<<"$st" | base64 -d)
}

# The accelerator libvirt-env.sh proved (kvm only if a kvm guest booted).
dtype=${BIGFLEET_DOMAIN_TYPE:-qemu}

echo "smoke: domain $DOM (type $dtype, network $BIGFLEET_NETWORK)"
# make_domain NAME CMDLINE: overlay volume on the golden image + domain, defined and started
make_domain() {
	local name=$1 cmdline=$2 disk xml
	v vol-create-as "$BIGFLEET_POOL" "$name.qcow2" 64M --format qcow2 \
		--backing-vol "$BIGFLEET_IMAGE" --backing-vol-format qcow2 >/dev/null
	disk=$(v vol-path --pool "$BIGFLEET_POOL" "$name.qcow2")
	step "create overlay volume ($name)"
	xml=$(mktemp)
	cat >"$xml" <<XML
<domain type='$dtype'>
  <name>$name</name>
  <memory unit='MiB'>256</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64'>hvm</type>
    <kernel>$BIGFLEET_KERNEL</kernel>
    <initrd>$BIGFLEET_INITRD</initrd>
    <cmdline>$cmdline</cmdline>
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='$disk'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <interface type='network'>
      <source network='$BIGFLEET_NETWORK'/>
      <model type='virtio'/>
    </interface>
    <serial type='pty'>
      <log file='/var/log/libvirt/qemu/$name-console.log' append='off'/>
      <target port='0'/>
    </serial>
    <console type='pty'><target type='serial' port='0'/></console>
    <channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
  </devices>
</domain>
XML
	v define "$xml" >/dev/null
	rm -f "$xml"
	step "define ($name)"
	v start "$name" >/dev/null
	step "start ($name)"
}

make_domain "$DOM" "$BIGFLEET_CMDLINE"

for i in $(seq 600); do
	agent '{"execute":"guest-ping"}' >/dev/null 2>&1 && break
	sleep 0.2
done
agent '{"execute":"guest-ping"}' >/dev/null || fail "no guest-ping answer (console: /var/log/libvirt/qemu/$DOM-console.log)"
step "start -> first guest-ping"
gexec /opt/bigfleet/booted
[ "$EXIT" = 0 ] || fail "booted hook without knobs: exit $EXIT, out '$OUT'"
step "booted hook: booted (exit 0)"
# a second guest, without agent, boots while the first one is exercised
make_domain "$NOAGENT" "$BIGFLEET_CMDLINE bigfleet.noagent=1"
# and a third whose boot takes 8 s after init starts, then fails
make_domain "$KNOBS" "$BIGFLEET_CMDLINE bigfleet.boot_delay=8 bigfleet.boot_fail=kubelet-prep.service"
v dumpxml "$DOM" | grep "name='org.qemu.guest_agent.0' state='connected'" >/dev/null ||
	fail "agent channel not shown as connected"

blob=$(mktemp)
head -c 100000 /dev/urandom >"$blob"
want=$(sha256sum "$blob" | cut -d' ' -f1)
h=$(agent '{"execute":"guest-file-open","arguments":{"path":"/opt/bigfleet/bootstrap.blob","mode":"w"}}' | json_num return)
[ -n "$h" ] || fail "guest-file-open gave no handle"
# 48000-byte chunks (a multiple of 3, so each chunk base64-encodes on its own)
off=0
size=$(stat -c %s "$blob")
while [ "$off" -lt "$size" ]; do
	b64=$(dd if="$blob" bs=48000 skip=$((off / 48000)) count=1 status=none | base64 -w0)
	agent "{\"execute\":\"guest-file-write\",\"arguments\":{\"handle\":$h,\"buf-b64\":\"$b64\"}}" >/dev/null
	off=$((off + 48000))
done
agent "{\"execute\":\"guest-file-close\",\"arguments\":{\"handle\":$h}}" >/dev/null
rm -f "$blob"
step "write 100 kB blob (open/write/close)"

gexec /opt/bigfleet/bootstrap c1
[ "$EXIT" = 0 ] || fail "bootstrap c1 exit $EXIT: $ERR"
step "guest-exec bootstrap c1 (+status polls)"
gexec /bin/cat /run/bigfleet/blob.sha256
[ "$OUT" = "$want" ] || fail "sha256 in guest '$OUT' != '$want'"
gexec /bin/cat /run/bigfleet/blob.size
[ "$OUT" = "$size" ] || fail "size in guest '$OUT' != $size"
gexec /bin/cat /run/bigfleet/cluster
[ "$OUT" = c1 ] || fail "cluster in guest '$OUT'"
step "check sha256/size/cluster in guest"

gexec /opt/bigfleet/bootstrap exit3
[ "$EXIT" = 3 ] || fail "bootstrap exit3: exit $EXIT"
[ "$ERR" = "bootstrap failed on purpose" ] || fail "bootstrap exit3 stderr: '$ERR'"
gexec /opt/bigfleet/bootstrap signal
[ "$SIGNAL" = 9 ] || fail "bootstrap signal: signal '$SIGNAL' exit '$EXIT'"
for want_exit in 1 1 0 0; do
	gexec /opt/bigfleet/ready ready3
	[ "$EXIT" = "$want_exit" ] || fail "ready ready3: exit $EXIT, want $want_exit"
done
gexec /opt/bigfleet/ready neverready
[ "$EXIT" = 1 ] || fail "ready neverready: exit $EXIT"
gexec /opt/bigfleet/ready c1
[ "$EXIT" = 0 ] || fail "ready c1: exit $EXIT"
gexec /opt/bigfleet/drain --force drainhang 5
[ "$EXIT" = 0 ] || fail "drain --force drainhang: exit $EXIT"
gexec /opt/bigfleet/drain c1 30
[ "$EXIT" = 0 ] || fail "drain c1: exit $EXIT"
gexec /bin/cat /run/bigfleet/drained
[ "$OUT" = drained ] || fail "drain did not write /run/bigfleet/drained"
gexec /bin/busybox test -e /run/bigfleet/cluster
[ "$EXIT" = 1 ] || fail "drain did not remove /run/bigfleet/cluster"
pid=$(agent '{"execute":"guest-exec","arguments":{"path":"/opt/bigfleet/bootstrap","arg":["hang"],"capture-output":true}}' | json_num pid)
sleep 1
agent "{\"execute\":\"guest-exec-status\",\"arguments\":{\"pid\":$pid}}" | grep '"exited":false' >/dev/null ||
	fail "bootstrap hang exited"
step "hooks: exit3, signal, ready3, neverready, drain, hang"

# The guest started with bigfleet.noagent=1 (booted meanwhile) must not answer.
for i in $(seq 300); do
	grep 'not starting qemu-guest-agent' "/var/log/libvirt/qemu/$NOAGENT-console.log" >/dev/null 2>&1 && break
	sleep 0.1
done
grep 'not starting qemu-guest-agent' "/var/log/libvirt/qemu/$NOAGENT-console.log" >/dev/null ||
	fail "$NOAGENT did not reach init's noagent branch"
if v qemu-agent-command "$NOAGENT" --timeout 2 '{"execute":"guest-ping"}' >/dev/null 2>&1; then
	fail "$NOAGENT answered guest-ping"
fi
v destroy "$NOAGENT" >/dev/null
step "bigfleet.noagent=1 guest: no agent"

# The knobs guest: booting (75, with what it waits for) until 8 s after its
# init started, then failed (1, naming the unit).
GDOM=$KNOBS
for i in $(seq 600); do
	agent '{"execute":"guest-ping"}' >/dev/null 2>&1 && break
	sleep 0.2
done
gexec /opt/bigfleet/booted
[ "$EXIT" = 75 ] || fail "$KNOBS booted hook: exit $EXIT, want 75 (booting); out '$OUT'"
case "$OUT" in "waiting for bigfleet.boot_delay ("*"s left)") ;; *) fail "$KNOBS booted hook said '$OUT'" ;; esac
echo "  $KNOBS: booted -> 75: $OUT"
for i in $(seq 60); do
	gexec /opt/bigfleet/booted
	[ "$EXIT" = 75 ] || break
	sleep 0.5
done
[ "$EXIT" = 1 ] || fail "$KNOBS booted hook after the delay: exit $EXIT, want 1; out '$OUT'"
[ "$OUT" = "unit kubelet-prep.service failed" ] || fail "$KNOBS booted hook said '$OUT'"
echo "  $KNOBS: booted -> 1: $OUT"
v destroy "$KNOBS" >/dev/null
GDOM=
step "boot_delay=8 boot_fail guest: 75, then 1"

agent '{"execute":"guest-shutdown"}' >/dev/null 2>&1 || true
for i in $(seq 300); do
	v domstate "$DOM" | grep 'shut off' >/dev/null && break
	sleep 0.1
done
v domstate "$DOM" | grep 'shut off' >/dev/null || fail "guest-shutdown did not power the guest off"
step "guest-shutdown -> shut off"
for d in "$DOM" "$NOAGENT" "$KNOBS"; do
	v undefine "$d" >/dev/null
	v vol-delete --pool "$BIGFLEET_POOL" "$d.qcow2" >/dev/null
done
step "undefine + delete overlays (3 domains)"
echo "smoke: PASS"
