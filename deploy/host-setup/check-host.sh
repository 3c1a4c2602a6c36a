#!/bin/bash
# Checks that a libvirt host confines what the BigFleet provider can reach
# and never logs guest-agent payloads (the bootstrap blob travels in
# guest-file-write). Read-only: it changes nothing. Run it on the host, as
# root, after the setup in README.md.
#
#   deploy/host-setup/check-host.sh [--conf-dir DIR] [--no-runtime]
#
# --conf-dir   where qemu.conf and libvirtd.conf live (default /etc/libvirt)
# --no-runtime do not ask the running daemon (virt-admin, virsh); judge the
#              configuration files only
#
# Prints one line per check (ok / WARN / FAIL) and exits 1 if any failed.
set -uo pipefail

conf=/etc/libvirt
runtime=1
while [ $# -gt 0 ]; do
	case "$1" in
	--conf-dir) conf=$2; shift 2 ;;
	--no-runtime) runtime=0; shift ;;
	*) echo "usage: $0 [--conf-dir DIR] [--no-runtime]" >&2; exit 2 ;;
	esac
done

failed=0
ok() { echo "ok    $*"; }
warn() { echo "WARN  $*"; }
fail() { echo "FAIL  $*"; failed=1; }

# setting FILE NAME: the value of NAME in a libvirt .conf file (quotes
# stripped), empty when unset. The last assignment wins, as in libvirt.
setting() {
	[ -r "$1" ] || return 0
	sed -n "s/^[[:space:]]*$2[[:space:]]*=[[:space:]]*//p" "$1" | tail -n1 | sed 's/^"\(.*\)"[[:space:]]*$/\1/; s/[[:space:]]*$//'
}

# ---- QEMU runs unprivileged and confined --------------------------------------
qemu_user=$(setting "$conf/qemu.conf" user)
case "$qemu_user" in
root | +0 | 0) fail "qemu.conf: user = $qemu_user: QEMU would run as root and reach every host file" ;;
"") ok "qemu.conf: QEMU runs as the build's default unprivileged user (libvirt-qemu on Debian)" ;;
*) ok "qemu.conf: QEMU runs as $qemu_user" ;;
esac
driver=$(setting "$conf/qemu.conf" security_driver)
if [ "$driver" = none ]; then
	fail "qemu.conf: security_driver = none turns sVirt confinement off"
fi
if [ "$(setting "$conf/qemu.conf" security_default_confined)" = 0 ]; then
	fail "qemu.conf: security_default_confined = 0 leaves guests unconfined"
fi

if [ "$runtime" = 1 ]; then
	models=$(virsh -q -c qemu:///system capabilities 2>/dev/null | sed -n 's:.*<model>\(.*\)</model>.*:\1:p' | sort -u | tr '\n' ' ')
	base=$(virsh -q -c qemu:///system capabilities 2>/dev/null | sed -n "s:.*<baselabel type='kvm'>\(.*\)</baselabel>.*:\1:p" | head -n1)
	case " $models" in
	*" apparmor "* | *" selinux "*) ok "sVirt: mandatory access control on (${models% }): each QEMU is confined to its own disks" ;;
	*" dac "*)
		if [ "$base" = "+0:+0" ]; then
			fail "sVirt: DAC only, and QEMU runs as root ($base)"
		else
			warn "sVirt: DAC only (no AppArmor/SELinux on this host): QEMU runs as ${base:-an unprivileged user} and reaches only files that user may open; enable AppArmor (apparmor + libvirt's profiles) or SELinux for per-guest labels"
		fi
		;;
	*) warn "sVirt: could not read the security models (virsh capabilities)" ;;
	esac
fi

# ---- agent payloads never logged ------------------------------------------------
# libvirt logs each agent command (guest-file-write carries the blob, base64)
# at debug level three times: in the qemu.qemu_agent module, in libvirt-qemu,
# the public API entry that logs every call's arguments, and in util.json,
# whose parser logs every string it parses. A message is written when
# the first log filter that matches its module (a glob; a plain word matches
# as a substring) allows its level, or, with no match, log_level does; and an
# output takes it when its own level allows it.
filters=$(setting "$conf/libvirtd.conf" log_filters)
outputs=$(setting "$conf/libvirtd.conf" log_outputs)
level=$(setting "$conf/libvirtd.conf" log_level)
if [ "$runtime" = 1 ] && command -v virt-admin >/dev/null; then
	f=$(virt-admin -q -c libvirtd:///system daemon-log-filters 2>/dev/null | sed -n 's/^ *Logging filters: *//p')
	o=$(virt-admin -q -c libvirtd:///system daemon-log-outputs 2>/dev/null | sed -n 's/^ *Logging outputs: *//p')
	[ -n "$o" ] && { filters=$f; outputs=$o; }
fi

# module_level NAME: the level at which NAME's messages pass the filters.
module_level() {
	local f lvl m pat
	for f in $filters; do
		lvl=${f%%:*}
		m=${f#*:}
		m=${m#+}
		case "$m" in *[*?[]*) pat=$m ;; *) pat="*$m*" ;; esac
		# shellcheck disable=SC2053 # glob match on purpose
		if [[ $1 == $pat ]]; then
			echo "$lvl"
			return
		fi
	done
	echo "${level:-3}"
}

min_output=4
for o in ${outputs:-3:stderr}; do
	l=${o%%:*}
	[ "$l" -lt "$min_output" ] 2>/dev/null && min_output=$l
done
leaky=""
for mod in qemu.qemu_agent libvirt-qemu util.json; do
	if [ "$(module_level "$mod")" -le 1 ] && [ "$min_output" -le 1 ]; then
		leaky="$leaky $mod"
	fi
done
if [ -n "$leaky" ]; then
	fail "libvirtd logging:$leaky logged at debug (filters: '${filters}', outputs: '${outputs}'): guest-file-write payloads, the bootstrap blob, reach the log. Put '3:qemu.qemu_agent 3:libvirt-qemu 3:util.json' first in log_filters (virt-admin daemon-log-filters '3:qemu.qemu_agent 3:libvirt-qemu 3:util.json ...')"
else
	ok "libvirtd logging: agent payloads are not logged (qemu.qemu_agent at level $(module_level qemu.qemu_agent), libvirt-qemu at $(module_level libvirt-qemu), util.json at $(module_level util.json), lowest output level $min_output)"
fi

exit $failed
