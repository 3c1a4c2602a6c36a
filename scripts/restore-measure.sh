#!/bin/bash
# Measures "Create from a booted snapshot" (issue 32's stretch; docs/restore.md):
# boot a template guest the way the provider would, `virsh save` it, freeze its
# overlay as a read-only backing layer, then restore it N times into new
# domains (new name, UUID, disk overlay) and time restore -> agent -> booted.
# Measurement only: nothing here is used by the provider.
#
#   scripts/restore-measure.sh net-up                bridge rst-br0 + busybox udhcpd (own DHCP)
#   scripts/restore-measure.sh template IMG          boot + save the template (IMG: tg | debian12)
#   scripts/restore-measure.sh restores IMG [N]      N restores one at a time, timed (default 5)
#   scripts/restore-measure.sh pair IMG              two restores side by side, identity compared
#   scripts/restore-measure.sh abi IMG               which restore-XML edits libvirt accepts
#   scripts/restore-measure.sh hotplug-nic IMG       restore + a second NIC hot-plugged with a new MAC
#   scripts/restore-measure.sh reidentify IMG        two restores, each re-identified (hook sketch)
#   scripts/restore-measure.sh clean                 remove every rst-* domain, file, bridge
#
# IMG tg: the test guest (scripts/guest, direct kernel boot, 256 MiB).
# IMG debian12: a COPY of the golden image at $WORK/rst-debian12-base.qcow2
#   (cp the newest /var/cache/bigfleet-libvirt/golden/*/debian12.qcow2 there).
# Needs: scripts/libvirt-env.sh up (libvirtd, staged kernel/initrd), jq, root.
# Everything it creates is named rst-*; results go to $WORK/results-*.txt.
set -euo pipefail

URI=${BIGFLEET_LIBVIRT_URI:-qemu:///system}
WORK=${RST_WORK:-/var/tmp/rst}
BR=rst-br0
KERNEL=${BIGFLEET_KERNEL:-/var/lib/libvirt/bigfleet-boot/vmlinuz}
INITRD=${BIGFLEET_INITRD:-/var/lib/libvirt/bigfleet-boot/initrd.img}
SAVE_FLAGS=${RST_SAVE_FLAGS:-} # e.g. --bypass-cache

v() { virsh -q -c "$URI" "$@"; }
now() { date +%s.%N; }
dt() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }
log() { echo "rst: $*" >&2; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

ga() { v qemu-agent-command "$1" "$2" --timeout "${3:-5}"; }

# wait_agent DOM TIMEOUT: first answered guest-ping
wait_agent() {
	local end=$(($(date +%s) + $2))
	until ga "$1" '{"execute":"guest-ping"}' 2 >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$end" ] || return 1
		sleep 0.1
	done
}

# gexec DOM PATH [ARG...]: run through guest-exec, sets EXIT, OUT, ERR
gexec() {
	local dom=$1 path=$2 pid st a='[]' x
	shift 2
	for x in "$@"; do a=$(jq -cn --argjson a "$a" --arg x "$x" '$a+[$x]'); done
	pid=$(ga "$dom" "$(jq -cn --arg p "$path" --argjson a "$a" '{execute:"guest-exec",arguments:{path:$p,arg:$a,"capture-output":true}}')" 10 | jq -r .return.pid) || return 1
	while :; do
		st=$(ga "$dom" "{\"execute\":\"guest-exec-status\",\"arguments\":{\"pid\":$pid}}" 10) || return 1
		[ "$(jq -r .return.exited <<<"$st")" = true ] && break
		sleep 0.1
	done
	EXIT=$(jq -r '.return.exitcode // -1' <<<"$st")
	OUT=$(jq -r '.return["out-data"] // ""' <<<"$st" | base64 -d)
	ERR=$(jq -r '.return["err-data"] // ""' <<<"$st" | base64 -d)
}
gsh() { gexec "$1" /bin/sh -c "$2"; }

# wait_booted DOM TIMEOUT: /opt/bigfleet/booted exits 0
wait_booted() {
	local end=$(($(date +%s) + $2))
	while :; do
		if gexec "$1" /opt/bigfleet/booted 2>/dev/null && [ "$EXIT" = 0 ]; then return 0; fi
		[ "$(date +%s)" -lt "$end" ] || return 1
		sleep 0.5
	done
}

mem_mib() { case $1 in tg) echo 256 ;; *) echo 1024 ;; esac; }

# domain_xml IMG NAME DISK [NIC]: the provider's shape (domxml.Build) plus
# <genid/>; NIC "none" leaves the NIC out, else a virtio NIC on rst-br0.
domain_xml() {
	local img=$1 name=$2 disk=$3 nic=${4:-yes} os
	if [ "$img" = tg ]; then
		os="<kernel>$KERNEL</kernel><initrd>$INITRD</initrd><cmdline>console=ttyS0 panic=-1 quiet</cmdline>"
	else
		os="<boot dev='hd'/>"
	fi
	cat <<EOF
<domain type='qemu'>
  <name>$name</name>
  <genid/>
  <memory unit='MiB'>$(mem_mib "$img")</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64'>hvm</type>$os</os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff><on_reboot>restart</on_reboot><on_crash>destroy</on_crash>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='$disk'/>
      <target dev='vda' bus='virtio'/>
    </disk>
$([ "$nic" = none ] || echo "    <interface type='bridge'><source bridge='$BR'/><model type='virtio'/></interface>")
    <serial type='pty'><log file='$WORK/$name.console.log'/><target port='0'/></serial>
    <console type='pty'><target type='serial' port='0'/></console>
    <channel type='unix'><source mode='bind'/><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
  </devices>
</domain>
EOF
}

base_of() {
	case $1 in
	tg)
		[ -f "$WORK/rst-tg-base.qcow2" ] || qemu-img create -q -f qcow2 "$WORK/rst-tg-base.qcow2" 64M
		echo "$WORK/rst-tg-base.qcow2"
		;;
	debian12) echo "$WORK/rst-debian12-base.qcow2" ;;
	*) echo "unknown image $1" >&2; exit 2 ;;
	esac
}

cmd_net_up() {
	mkdir -p "$WORK"
	chmod 755 "$WORK"
	if ! ip link show "$BR" >/dev/null 2>&1; then
		ip link add "$BR" type bridge
		ip addr add 10.231.0.1/24 dev "$BR"
		ip link set "$BR" up
	fi
	if ! [ -f "$WORK/udhcpd.pid" ] || ! kill -0 "$(cat "$WORK/udhcpd.pid")" 2>/dev/null; then
		cat >"$WORK/udhcpd.conf" <<EOF
start 10.231.0.10
end 10.231.0.200
interface $BR
lease_file $WORK/udhcpd.leases
pidfile $WORK/udhcpd.pid
auto_time 2
option subnet 255.255.255.0
option lease 3600
EOF
		: >"$WORK/udhcpd.leases"
		setsid busybox udhcpd -f "$WORK/udhcpd.conf" >"$WORK/udhcpd.log" 2>&1 </dev/null &
		sleep 0.5
	fi
	log "bridge $BR 10.231.0.1/24, udhcpd pid $(cat "$WORK/udhcpd.pid")"
}

cmd_template() {
	local img=$1 name=rst-$1-tpl base t0 t1 t2 t3 t4 save
	base=$(base_of "$img")
	cmd_net_up
	qemu-img create -q -f qcow2 -b "$base" -F qcow2 "$WORK/$name.qcow2"
	domain_xml "$img" "$name" "$WORK/$name.qcow2" >"$WORK/$name.xml"
	v define "$WORK/$name.xml" >/dev/null
	t0=$(now)
	v start "$name" >/dev/null
	t1=$(now)
	wait_agent "$name" 600 || { log "template agent never answered"; exit 1; }
	t2=$(now)
	wait_booted "$name" 900 || { log "booted never 0: $OUT"; exit 1; }
	t3=$(now)
	# let the first-boot work settle before the snapshot
	sleep "${RST_SETTLE:-5}"
	save=$WORK/$name.save
	rm -f "$save"
	local ts=$(now)
	v save "$name" "$save" $SAVE_FLAGS >/dev/null
	t4=$(now)
	v undefine "$name" >/dev/null
	mv "$WORK/$name.qcow2" "$WORK/$name-frozen.qcow2"
	chmod 0444 "$WORK/$name-frozen.qcow2"
	{
		echo "template $img: start $(dt "$t0" "$t1")s, start->agent $(dt "$t0" "$t2")s, start->booted $(dt "$t0" "$t3")s (load $(load))"
		echo "save $img ($SAVE_FLAGS): $(dt "$ts" "$t4")s, size $(stat -c %s "$save") bytes, frozen layer $(stat -c %s "$WORK/$name-frozen.qcow2") bytes"
	} | tee -a "$WORK/results-$img.txt"
}

# patch_header SAVE NAME UUID: libvirt refuses a restore XML whose <name> or
# <uuid> differs from the save image's header ("Target domain name/uuid ...
# does not match source"), so rewrite the domain XML inside the header in
# place (libvirt 9.0's format: 92-byte header, then the domain XML, NUL, the
# migration cookie, NUL, zero padding; no checksum). Private format: a real
# implementation would need libvirt's blessing or its own file.
patch_header() {
	python3 - "$@" <<'PY'
import re, struct, sys
path, name, uuid = sys.argv[1:4]
with open(path, "r+b") as f:
    h = f.read(92)
    assert h[:16] == b"LibvirtQemudSave", h[:16]
    ver, dlen, run, comp, coff = struct.unpack("<5I", h[16:36])
    data = f.read(dlen)
    dom = data[:coff].split(b"\0")[0].decode()
    cookie = data[coff:].split(b"\0")[0]
    dom = re.sub(r"<name>[^<]*</name>", "<name>%s</name>" % name, dom, count=1)
    dom = re.sub(r"<uuid>[^<]*</uuid>", "<uuid>%s</uuid>" % uuid, dom, count=1)
    d = dom.encode() + b"\0"
    new = d + cookie + b"\0"
    assert len(new) <= dlen
    f.seek(16)
    f.write(struct.pack("<5I", ver, dlen, run, comp, len(d)))
    f.seek(92)
    f.write(new + b"\0" * (dlen - len(new)))
PY
}

# prep_clone IMG NAME [UUIDMODE]: a new overlay over the frozen layer and
# the save image's XML edited for NAME. UUIDMODE patch (default: new name
# and UUID written into the save header too), xml (new name and UUID in the
# XML only), keep (new name in the XML only, the header's UUID).
prep_clone() {
	local img=$1 name=$2 mode=${3:-patch} tpl=rst-$1-tpl u
	local save=$WORK/$tpl.save disk=$WORK/$name.qcow2
	qemu-img create -q -f qcow2 -b "$WORK/$tpl-frozen.qcow2" -F qcow2 "$disk"
	u=$(cat /proc/sys/kernel/random/uuid)
	[ "$mode" = patch ] && patch_header "$save" "$name" "$u"
	v save-image-dumpxml "$save" --security-info >"$WORK/$name.xml"
	sed -i -e "s|<name>[^<]*</name>|<name>$name</name>|" \
		-e "s|$WORK/$tpl.qcow2|$disk|" \
		-e "s|$WORK/$tpl.console.log|$WORK/$name.console.log|" "$WORK/$name.xml"
	[ "$mode" = keep ] || sed -i -e "s|<uuid>.*</uuid>|<uuid>$u</uuid>|" "$WORK/$name.xml"
}

# restore_one IMG NAME: restore the template into NAME; sets T_PREP (overlay
# + header patch + XML), T_RESTORE, T_AGENT, T_BOOTED (all from t0 = before
# prep_clone, so they include the provider-side preparation)
restore_one() {
	local img=$1 name=$2 tpl=rst-$1-tpl t0 tp t1 t2 t3
	t0=$(now)
	prep_clone "$img" "$name"
	tp=$(now)
	v restore "$WORK/$tpl.save" --xml "$WORK/$name.xml" >/dev/null
	t1=$(now)
	wait_agent "$name" 120 || { log "$name: agent never answered"; return 1; }
	t2=$(now)
	wait_booted "$name" 120 || { log "$name: booted never 0: $OUT"; return 1; }
	t3=$(now)
	T_PREP=$(dt "$t0" "$tp") T_RESTORE=$(dt "$t0" "$t1") T_AGENT=$(dt "$t0" "$t2") T_BOOTED=$(dt "$t0" "$t3")
}

kill_dom() {
	v destroy "$1" >/dev/null 2>&1 || true
	v undefine "$1" --managed-save --nvram >/dev/null 2>&1 || true
	rm -f "$WORK/$1.qcow2" "$WORK/$1.xml"
}

cmd_restores() {
	local img=$1 n=${2:-5} i name
	for i in $(seq 1 "$n"); do
		name=rst-$img-r$i
		restore_one "$img" "$name"
		# the first thing run after booted: three kernel UUIDs (is the RNG state shared?)
		gsh "$name" 'cat /proc/sys/kernel/random/uuid /proc/sys/kernel/random/uuid /proc/sys/kernel/random/uuid | tr "\n" " "; echo; date +%s'
		echo "restore $img #$i: prep $T_PREP s, virsh restore $T_RESTORE s, restore->agent $T_AGENT s, restore->booted $T_BOOTED s (load $(load)); uuids $(head -1 <<<"$OUT"); guest clock $(($(tail -1 <<<"$OUT") - $(date +%s))) s vs host" |
			tee -a "$WORK/results-$img.txt"
		kill_dom "$name"
	done
	grep "restore $img #" "$WORK/results-$img.txt" | tail -"$n" |
		sed -E 's/.*virsh restore ([0-9.]+) s, restore->agent ([0-9.]+) s, restore->booted ([0-9.]+) s.*/\1 \2 \3/' >"$WORK/t.$img"
	# nearest-rank percentiles
	pct() { sort -n | awk -v p="$1" '{x[NR]=$1} END{k=int(p*NR/100); if (k<p*NR/100) k++; if (k<1) k=1; print x[k]}'; }
	echo "p50/p90 over $n: virsh restore $(cut -d' ' -f1 "$WORK/t.$img" | pct 50)/$(cut -d' ' -f1 "$WORK/t.$img" | pct 90) s," \
		"->agent $(cut -d' ' -f2 "$WORK/t.$img" | pct 50)/$(cut -d' ' -f2 "$WORK/t.$img" | pct 90) s," \
		"->booted $(cut -d' ' -f3 "$WORK/t.$img" | pct 50)/$(cut -d' ' -f3 "$WORK/t.$img" | pct 90) s" | tee -a "$WORK/results-$img.txt"
}

IDENT='
echo "machine-id: $(cat /etc/machine-id 2>/dev/null)"
echo "boot_id: $(cat /proc/sys/kernel/random/boot_id)"
echo "hostname: $(hostname)"
echo "dmi product_uuid: $(cat /sys/class/dmi/id/product_uuid 2>/dev/null)"
for n in /sys/class/net/*; do [ "${n##*/}" = lo ] || echo "mac ${n##*/}: $(cat $n/address)"; done
echo "ipv4: $(ip -4 -o addr show scope global 2>/dev/null | awk "{print \$2, \$4}" | tr "\n" " ")"
echo "ipv6: $(ip -6 -o addr show 2>/dev/null | awk "{print \$2, \$4}" | tr "\n" " ")"
echo "ssh host keys: $(ls /etc/ssh/ssh_host_*_key.pub 2>/dev/null | wc -l)"
for k in /etc/ssh/ssh_host_*_key.pub; do [ -f "$k" ] && ssh-keygen -lf "$k"; done
echo "random-seed: $(sha256sum /var/lib/systemd/random-seed 2>/dev/null | cut -c1-16)"
echo "dhcp duid/iaid: $(networkctl status 2>/dev/null | grep -i -E "duid|iaid" | tr -s " " | tr "\n" " ")"
echo "kaslr: $(grep -m1 -E " (T|t) _stext$" /proc/kallsyms)"
echo "vmgenid sysfs: $(ls /sys/bus/acpi/devices 2>/dev/null | grep -i -E "QEMUVGID|VMGENID" | tr "\n" " ")"
echo "vmgenid module: $(ls /lib/modules/$(uname -r)/kernel/drivers/virt 2>/dev/null | tr "\n" " ")"
echo "kernel: $(uname -r)"
echo "uptime: $(cut -d" " -f1 /proc/uptime)"
echo "date: $(date +%s)"
echo "dmesg rng:"; dmesg | grep -i -E "vmgenid|crng|random" | tail -5
'

cmd_pair() {
	local img=$1 a=rst-$1-pa b=rst-$1-pb out=$WORK/identity-$1.txt
	restore_one "$img" "$a"
	gsh "$a" 'cat /proc/sys/kernel/random/uuid /proc/sys/kernel/random/uuid | tr "\n" " "'
	local ua=$OUT
	restore_one "$img" "$b"
	gsh "$b" 'cat /proc/sys/kernel/random/uuid /proc/sys/kernel/random/uuid | tr "\n" " "'
	local ub=$OUT
	sleep "${RST_PAIR_WAIT:-15}" # let networkd renew/announce, if it does
	{
		echo "== $img pair ($(date -u +%FT%TZ), host date $(date +%s))"
		echo "first uuids A: $ua"
		echo "first uuids B: $ub"
		for d in "$a" "$b"; do
			echo "-- $d: XML MAC $(v domiflist "$d" | awk '{print $5}' | tr '\n' ' ') uuid $(v domuuid "$d")"
			gsh "$d" "$IDENT"
			echo "$OUT$ERR"
			echo "agent interfaces: $(ga "$d" '{"execute":"guest-network-get-interfaces"}' 2>&1 | jq -c '[.return[] | {name, "hardware-address", ip: [."ip-addresses"[]?."ip-address"]}]' 2>&1)"
		done
		echo "-- dhcp leases (udhcpd):"
		busybox dumpleases -f "$WORK/udhcpd.leases" 2>&1 || true
		echo "-- host bridge fdb for $BR:"
		bridge fdb show br "$BR" 2>/dev/null | grep -v permanent || true
	} | tee "$out"
	[ -n "${RST_KEEP:-}" ] || { kill_dom "$a"; kill_dom "$b"; }
}

# try_edit IMG LABEL SED-EXPR [UUIDMODE]: restore with the saved XML edited,
# report libvirt's verdict and what the guest sees
try_edit() {
	local img=$1 label=$2 expr=$3 mode=${4:-patch} name=rst-$1-abi tpl=rst-$1-tpl res extra
	prep_clone "$img" "$name" "$mode"
	[ -z "$expr" ] || sed -i -e "$expr" "$WORK/$name.xml"
	if res=$(v restore "$WORK/$tpl.save" --xml "$WORK/$name.xml" 2>&1); then
		if wait_agent "$name" 60; then
			gsh "$name" 'for n in /sys/class/net/*; do [ "${n##*/}" = lo ] || printf "%s " "$(cat $n/address)"; done; printf "| vcpus %s | memtotal %s" "$(nproc)" "$(grep MemTotal /proc/meminfo | tr -s " " | cut -d" " -f2)"'
			extra="guest: MACs $OUT; XML: genid $(v dumpxml "$name" | grep -o '<genid>[^<]*' | cut -c8-), MAC $(v domiflist "$name" | awk '{print $5}' | tr '\n' ' '), uuid $(v domuuid "$name")"
		else extra="agent did not answer in 60 s"; fi
		echo "$img edit [$label]: ACCEPTED; $extra"
	else
		echo "$img edit [$label]: REFUSED: $(tr '\n' ' ' <<<"$res")"
	fi
	kill_dom "$name"
}

cmd_abi() {
	local img=$1 f
	f=$WORK/results-$img.txt
	{
		try_edit "$img" "new name+uuid in the XML only (header unchanged)" "" xml
		try_edit "$img" "new name, header's uuid (header unchanged)" "" keep
		try_edit "$img" "no <uuid> element, new name (header unchanged)" "/<uuid>/d" keep
		try_edit "$img" "new name+uuid patched into the save header, new disk path (baseline)" ""
		try_edit "$img" "new MAC" "s|<mac address='[^']*'/>|<mac address='52:54:00:aa:bb:01'/>|"
		try_edit "$img" "genid removed" "/<genid>/d"
		try_edit "$img" "genid given a new value" "s|<genid>.*</genid>|<genid>$(cat /proc/sys/kernel/random/uuid)</genid>|"
		try_edit "$img" "machine type pc-i440fx-7.1" "s|machine='pc-i440fx-7.2'|machine='pc-i440fx-7.1'|"
		try_edit "$img" "machine type q35" "s|machine='pc-i440fx-7.2'|machine='pc-q35-7.2'|"
		try_edit "$img" "cpu model Nehalem" "s|</features>|</features><cpu mode='custom' match='exact'><model fallback='forbid'>Nehalem</model></cpu>|"
		try_edit "$img" "memory 512 MiB more" "s|<memory unit='KiB'>\([0-9]*\)</memory>|<memory unit='KiB'>$((($(mem_mib "$img") + 512) * 1024))</memory>|;s|<currentMemory unit='KiB'>[0-9]*</currentMemory>|<currentMemory unit='KiB'>$((($(mem_mib "$img") + 512) * 1024))</currentMemory>|"
		try_edit "$img" "vcpu 2" "s|<vcpu placement='static'>1</vcpu>|<vcpu placement='static'>2</vcpu>|"
		try_edit "$img" "NIC on another bridge (virbr-bf0)" "s|<source bridge='$BR'/>|<source bridge='virbr-bf0'/>|"
		try_edit "$img" "NIC removed" "/<interface type='bridge'>/,/<\/interface>/d"
	} | tee -a "$f"
}

# hotplug-nic: template saved WITHOUT a NIC; a NIC with a fresh MAC is
# attached after the restore (the alternative when the MAC cannot change).
cmd_hotplug_nic() {
	local img=$1 name=rst-$1-hp t0 t1 t2 mac
	mac=52:54:00:$(od -An -N3 -tx1 /dev/urandom | tr -s ' ' ':' | cut -c2-)
	restore_one "$img" "$name"
	t0=$(now)
	v attach-interface "$name" bridge "$BR" --model virtio --mac "$mac" --live >/dev/null
	t1=$(now)
	local got="" end=$(($(date +%s) + 120))
	while [ "$(date +%s)" -lt "$end" ]; do
		gsh "$name" "for n in /sys/class/net/*; do [ \"\$(cat \$n/address)\" = $mac ] && i=\${n##*/}; done; [ -n \"\$i\" ] && echo \"\$i \$(ip -4 -o addr show dev \$i scope global | awk '{print \$4}')\""
		case $OUT in *10.231.*) got=$OUT; break ;; esac
		sleep 0.5
	done
	t2=$(now)
	echo "hotplug-nic $img: attach-interface $(dt "$t0" "$t1") s, attach->DHCP address $(dt "$t0" "$t2") s: ${got:-none; last: $OUT}" | tee -a "$WORK/results-$img.txt"
	[ -n "${RST_KEEP:-}" ] || kill_dom "$name"
}

# reidentify IMG: two restores; on each a sketch of the re-identify hook
# (debian12 only: needs python3, systemd) with 64 random bytes from the host;
# then the kernel's UUIDs, machine-id and hostname compared.
REID='set -e
seed=$1; id=$2; name=$3
# the kernel RNG: mix host bytes in, then force a CRNG reseed (RNDRESEEDCRNG)
python3 -c "import fcntl,sys; f=open(\"/dev/urandom\",\"wb\"); f.write(bytes.fromhex(sys.argv[1])); f.flush(); fcntl.ioctl(f, 0x5207)" "$seed"
printf "%s\n" "$id" >/etc/machine-id
hostnamectl set-hostname "$name" 2>/dev/null || hostname "$name"
rm -f /var/lib/systemd/random-seed
networkctl renew ens2 >/dev/null 2>&1 || true
echo "uuids $(cat /proc/sys/kernel/random/uuid) $(cat /proc/sys/kernel/random/uuid) machine-id $(cat /etc/machine-id) hostname $(hostname) boot_id $(cat /proc/sys/kernel/random/boot_id)"'

cmd_reidentify() {
	local img=$1 d t0 t1
	for d in rst-$img-ia rst-$img-ib; do
		restore_one "$img" "$d"
		t0=$(now)
		gexec "$d" /bin/sh -c "$REID" reid "$(od -An -N64 -tx1 /dev/urandom | tr -d ' \n')" "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')" "$d"
		t1=$(now)
		echo "reidentify $img $d: exit $EXIT in $(dt "$t0" "$t1") s (restore->booted $T_BOOTED s): $OUT $ERR" | tee -a "$WORK/results-$img.txt"
	done
	[ -n "${RST_KEEP:-}" ] || { kill_dom "rst-$img-ia"; kill_dom "rst-$img-ib"; }
}

cmd_clean() {
	local d
	for d in $(v list --all --name | grep '^rst-' || true); do kill_dom "$d"; done
	if [ -f "$WORK/udhcpd.pid" ]; then kill "$(cat "$WORK/udhcpd.pid")" 2>/dev/null || true; fi
	ip link del "$BR" 2>/dev/null || true
	rm -rf "$WORK"
	rm -f /var/log/libvirt/qemu/rst-*.log
}

case ${1:-} in
net-up) cmd_net_up ;;
template) cmd_template "$2" ;;
restores) cmd_restores "$2" "${3:-5}" ;;
pair) cmd_pair "$2" ;;
abi) cmd_abi "$2" ;;
hotplug-nic) cmd_hotplug_nic "$2" ;;
reidentify) cmd_reidentify "$2" ;;
clean) cmd_clean ;;
*) sed -n '2,20p' "$0"; exit 2 ;;
esac
