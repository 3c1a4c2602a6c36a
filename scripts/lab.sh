#!/bin/bash
# The lab: several real libvirt hosts on this machine, each a host in its
# own right (docs/lab.md).
#
#   scripts/lab.sh up [N]            bring N hosts up (default 3), write /run/bigfleet-lab/env
#   scripts/lab.sh down              remove every host, namespace, veth, mount and file
#   scripts/lab.sh status            what runs
#   scripts/lab.sh check-clean       fail if anything of the lab is left (after down)
#   scripts/lab.sh env               print the env file
#   scripts/lab.sh exec HOST CMD...  run CMD as root inside HOST
#   scripts/lab.sh fault HOST KIND [ARG]   inject a fault (below)
#   scripts/lab.sh heal HOST         remove every fault of HOST
#
# Fault kinds: partition | delay MS | loss PCT | freeze | thaw | kill-daemon
# | start-daemon | reboot | rotate-client-cert [SUBJECT] | swap-hostkey.
#
# Each host: its own network namespace with an address on the lab bridge
# (198.18.77.0/24, the benchmarking range: nothing outside this machine), its
# own mount, PID, UTS and IPC namespaces, and its own Debian root (an overlay
# of scripts/lab/rootfs.sh's cached bookworm (libvirt 9.0) or trixie (11.3)
# root) holding its /etc, /var/lib/libvirt and logs; its own D-Bus, polkitd,
# sshd, virtlogd and libvirtd, storage pool, golden image and network. It is
# set up by deploy/host-setup as an operator would. Hosts alternate:
#   lab1 bookworm tls   lab2 trixie libssh   lab3 trixie tls   lab4 bookworm libssh ...
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
STATE=${BIGFLEET_LAB_STATE:-/run/bigfleet-lab}
DATA=${BIGFLEET_LAB_DATA:-/var/lib/bigfleet-lab}
NET_PREFIX=198.18.77
NET=$NET_PREFIX.0/24
BRIDGE=bflab0
POOL=bigfleet
POOL_DIR=/var/lib/libvirt/bigfleet-pool
GOLDEN=bigfleet-golden.qcow2
BOOT_DIR=/var/lib/libvirt/bigfleet-boot
# One word: BIGFLEET_LAB_ARGS is expanded unquoted.
CMDLINE=console=ttyS0
PROVIDER_DN="/CN=bigfleet-provider/O=BigFleet" # libvirt prints it CN=bigfleet-provider,O=BigFleet
HOSTS_MARK='# bigfleet-lab'
export DEBIAN_FRONTEND=noninteractive

log() { echo "lab: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1fs", b-a}'; }
[ "$(id -u)" = 0 ] || die "must run as root"

lock() {
	mkdir -p "$STATE"
	exec 8>"$STATE/.lock"
	flock -w 900 8 || die "another lab.sh run holds $STATE/.lock"
}

# ---- the hosts' facts ----------------------------------------------------------
suite_of() { case $(($1 % 4)) in 1 | 0) echo bookworm ;; *) echo trixie ;; esac; }
mode_of() { case $(($1 % 4)) in 1 | 3) echo tls ;; *) echo libssh ;; esac; }
ip_of() { echo "$NET_PREFIX.$((10 + $1))"; }
index_of() { [[ $1 =~ ^lab([0-9]+)$ ]] || die "no lab host $1"; echo "${BASH_REMATCH[1]}"; }
hosts_up() { ls "$STATE/hosts" 2>/dev/null | sed -n 's/\.pid$//p' | sort -V; }
init_pid() {
	local p
	p=$(cat "$STATE/hosts/$1.pid" 2>/dev/null) || die "host $1 is not up"
	echo "$p"
}

# in_host HOST CMD...: CMD as root inside the host (all its namespaces, its
# root), without the lab's lock descriptor (a daemon it starts would keep
# the lock for good).
in_host() {
	local h=$1; shift
	nsenter -t "$(init_pid "$h")" -m -u -i -n -p -r -w -- "$@" 8>&-
}

# ---- machine packages ----------------------------------------------------------
PACKAGES=(iptables openssl openssh-client libvirt-clients util-linux iproute2 mmdebstrap)
ensure_packages() { "$here/ensure-packages.sh" "${PACKAGES[@]}"; }

# ---- identities ----------------------------------------------------------------
# The provider's credentials are laid out as a mounted Kubernetes Secret:
# files are symlinks into ..data, itself a symlink swapped atomically on
# update, so a rotation replaces every file at once, in place.
secret_publish() { # DIR SRC: make SRC's files DIR's current contents
	local dir=$1 src=$2 ts f
	ts=..$(date +%Y_%m_%d_%H_%M_%S.%N)
	mkdir -p "$dir"
	cp -a "$src" "$dir/$ts"
	ln -sfn "$ts" "$dir/..data_tmp"
	mv -Tf "$dir/..data_tmp" "$dir/..data"
	for f in "$dir/$ts"/*; do
		f=${f##*/}
		[ -L "$dir/$f" ] || ln -sfn "..data/$f" "$dir/$f"
	done
	find "$dir" -maxdepth 1 -name '..20*' ! -name "$ts" -exec rm -rf {} +
}

make_identities() {
	local pki=$STATE/pki
	"$here/lab/pki.sh" ca "$pki/ca"
	# A second CA nobody trusts: for tests of a host presenting a foreign certificate.
	CA_CN="BigFleet foreign CA" "$here/lab/pki.sh" ca "$pki/foreign-ca"
	"$here/lab/pki.sh" ssh-key "$pki/ssh"
}

# host_creds HOST: the provider's Secret for HOST (creds/HOST), minted once.
host_creds() {
	local h=$1 i mode tmp
	i=$(index_of "$h"); mode=$(mode_of "$i")
	[ -e "$STATE/creds/$h/..data" ] && return 0
	tmp=$(mktemp -d)
	if [ "$mode" = tls ]; then
		"$here/lab/pki.sh" client "$STATE/pki/ca" "$PROVIDER_DN" "$tmp"
	else
		cp "$STATE/pki/ssh/id_ed25519" "$tmp/id_ed25519"
		: >"$tmp/known_hosts"
	fi
	secret_publish "$STATE/creds/$h" "$tmp"
	rm -rf "$tmp"
}

uri_of() {
	local h=$1 i c=$STATE/creds/$1
	i=$(index_of "$h")
	if [ "$(mode_of "$i")" = tls ]; then
		echo "qemu+tls://$h/system?pkipath=$c"
	else
		echo "qemu+libssh://bigfleet@$h/system?keyfile=$c/id_ed25519&known_hosts=$c/known_hosts&known_hosts_verify=normal&sshauth=privkey"
	fi
}

# ---- network --------------------------------------------------------------------
# (No `cmd | grep -q` under pipefail: grep -q exits at the first match, cmd
# may then die of SIGPIPE and the pipeline counts as failed.)
ensure_bridge() {
	ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
	[[ $(ip addr show dev "$BRIDGE") == *" $NET_PREFIX.1/"* ]] || ip addr add "$NET_PREFIX.1/24" dev "$BRIDGE"
	ip link set "$BRIDGE" up
}

# Names resolve on this machine through /etc/hosts, marked so down removes them.
write_etc_hosts() { # N
	local i tmp
	tmp=$(mktemp)
	grep -v "$HOSTS_MARK\$" /etc/hosts >"$tmp" || true
	for i in $(seq "$1"); do echo "$(ip_of "$i") lab$i $HOSTS_MARK" >>"$tmp"; done
	cat "$tmp" >/etc/hosts
	rm -f "$tmp"
}

ensure_netns() { # HOST INDEX
	local h=$1 ns=bflab-$1 veth=bfl-$1
	[ -e "/run/netns/$ns" ] || ip netns add "$ns"
	if ! ip link show "$veth" >/dev/null 2>&1; then
		ip link add "$veth" type veth peer name eth0 netns "$ns"
		ip link set "$veth" master "$BRIDGE" up
	fi
	[[ $(ip -n "$ns" addr show dev eth0) == *" $(ip_of "$2")/"* ]] || ip -n "$ns" addr add "$(ip_of "$2")/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" link set lo up
	# The fault chain: every fault is a rule here, heal flushes it.
	if ! ip netns exec "$ns" iptables -n -L BFLAB >/dev/null 2>&1; then
		ip netns exec "$ns" iptables -N BFLAB
		ip netns exec "$ns" iptables -I INPUT -j BFLAB
		ip netns exec "$ns" iptables -I OUTPUT -j BFLAB
	fi
}

# ---- a host's root -----------------------------------------------------------
# Files the host's init and setup read, written into its upper layer (its
# own /etc). deploy/host-setup is copied whole: the lab sets hosts up from it.
stage_host() { # HOST INDEX N
	local h=$1 i=$2 n=$3 up=$DATA/hosts/$1/upper j
	mkdir -p "$up/etc/bigfleet-lab/pki" "$up/usr/local/sbin" "$up/root" "$up$BOOT_DIR"
	install -m 0755 "$here/lab/in-host-init.sh" "$up/usr/local/sbin/bigfleet-lab-init"
	install -m 0755 "$here/lab/in-host-setup.sh" "$up/usr/local/sbin/bigfleet-lab-setup"
	install -m 0755 "$here/lab/in-host-daemon.sh" "$up/usr/local/sbin/bigfleet-lab-daemon"
	rm -rf "$up/root/host-setup"
	cp -r "$repo/deploy/host-setup" "$up/root/host-setup"
	printf 'LAB_NAME=%s\nLAB_MODE=%s\nLAB_NET=%s\n' "$h" "$(mode_of "$i")" "$NET" >"$up/etc/bigfleet-lab/host.env"
	: >"$up/etc/bigfleet-lab/hosts"
	for j in $(seq "$n"); do echo "$(ip_of "$j") lab$j bigfleet-lab" >>"$up/etc/bigfleet-lab/hosts"; done
	local pki=$up/etc/bigfleet-lab/pki
	if [ ! -s "$pki/cert.pem" ]; then
		"$here/lab/pki.sh" server "$STATE/pki/ca" "$h" "$(ip_of "$i")" "$pki"
	fi
	cp "$STATE/pki/ca/ca.pem" "$pki/ca.pem"
	cp "$STATE/pki/ssh/id_ed25519.pub" "$pki/provider.pub"
	install -m 0644 "$GUEST_KERNEL" "$up$BOOT_DIR/vmlinuz"
	install -m 0644 "$GUEST_INITRD" "$up$BOOT_DIR/initrd.img"
}

start_host() { # HOST INDEX
	local h=$1 i=$2 dir=$DATA/hosts/$1 lower upid cpid k
	lower=$("$here/lab/rootfs.sh" "$(suite_of "$i")")
	mkdir -p "$STATE/hosts"
	ip netns exec "bflab-$h" setsid unshare --mount --pid --uts --ipc --fork --propagation private \
		"$here/lab/host-init.sh" "$h" "$dir" "$lower" </dev/null >>"$dir/init.out" 2>&1 8>&- &
	upid=$!
	for k in $(seq 100); do
		cpid=$(pgrep -P "$upid" || true)
		[ -n "$cpid" ] && break
		sleep 0.05
	done
	[ -n "$cpid" ] || die "host $h did not start (see $dir/init.out)"
	echo "$cpid" >"$STATE/hosts/$h.pid"
}

# wait_host HOST: its libvirtd answers inside and its sshd listens. The
# host's own file first: until its PID 1 has switched to the host's root,
# nsenter lands in the machine's, whose virsh would ask the machine's libvirtd.
wait_host() {
	local h=$1 k
	for k in $(seq 300); do
		if in_host "$h" test -s /etc/bigfleet-lab/host.env 2>/dev/null &&
			in_host "$h" virsh -q -c qemu:///system version >/dev/null 2>&1 &&
			[ -s "$DATA/hosts/$h/upper/etc/ssh/ssh_host_ed25519_key.pub" ]; then return 0; fi
		kill -0 "$(init_pid "$h")" 2>/dev/null || die "host $h died (see $DATA/hosts/$h/init.out and its /var/log/bigfleet-lab-init.log)"
		sleep 0.2
	done
	die "host $h: libvirtd does not answer after 60 s (see $DATA/hosts/$h/upper/var/log/)"
}

# The objects the provider uses, made as root inside the host (lab admin rule).
libvirt_objects() { # HOST
	local h=$1 v="virsh -q -c qemu:///system"
	in_host "$h" sh -c "
		set -e
		$v pool-info $POOL >/dev/null 2>&1 || { mkdir -p $POOL_DIR; $v pool-define-as $POOL dir --target $POOL_DIR >/dev/null; }
		$v pool-info $POOL | grep 'State:.*running' >/dev/null || $v pool-start $POOL >/dev/null
		$v pool-autostart $POOL >/dev/null
		$v pool-refresh $POOL >/dev/null
		$v vol-info --pool $POOL $GOLDEN >/dev/null 2>&1 || $v vol-create-as $POOL $GOLDEN 64M --format qcow2 >/dev/null
		chmod 0644 $POOL_DIR/$GOLDEN
		if ! $v net-info bigfleet >/dev/null 2>&1; then
			printf '%s\n' '<network><name>bigfleet</name><forward mode=\"bridge\"/><bridge name=\"virbr-bf0\"/></network>' >/tmp/net.xml
			$v net-define /tmp/net.xml >/dev/null
		fi
		$v net-info bigfleet | grep 'Active:.*yes' >/dev/null || $v net-start bigfleet >/dev/null
		$v net-autostart bigfleet >/dev/null"
}

# The provider's pinned known_hosts for an SSH host: the key read from the
# host's own files, never from the network (no trust on first use).
pin_hostkey() { # HOST
	local h=$1 c=$STATE/creds/$1 tmp
	[ "$(mode_of "$(index_of "$h")")" = libssh ] || return 0
	tmp=$(mktemp -d)
	cp -L "$c/id_ed25519" "$tmp/"
	awk -v h="$h" '{print h, $1, $2}' "$DATA/hosts/$h/upper/etc/ssh/ssh_host_ed25519_key.pub" >"$tmp/known_hosts"
	cmp -s "$tmp/known_hosts" "$c/known_hosts" || secret_publish "$c" "$tmp"
	rm -rf "$tmp"
}

# ---- env file ---------------------------------------------------------------------
write_env() { # N
	local n=$1 i h hosts=$STATE/hosts.yaml
	{
		echo "# the lab's hosts (scripts/lab.sh), one zone per host; zone lab holds all in hosts-zone.yaml"
		echo "hosts:"
		for i in $(seq "$n"); do
			h=lab$i
			printf '  - name: %s\n    zone: %s\n    uri: "%s"\n    labels: {libvirt: "%s", transport: "%s"}\n' \
				"$h" "$h" "$(uri_of "$h")" "$(suite_of "$i")" "$(mode_of "$i")"
		done
	} >"$hosts"
	sed 's/^    zone: lab[0-9]*$/    zone: lab/' "$hosts" >"$STATE/hosts-zone.yaml"
	local accel=qemu
	cat >"$STATE/env.tmp" <<ENV
export BIGFLEET_LAB_HOSTS=$hosts
export BIGFLEET_LAB_HOSTS_ZONE=$STATE/hosts-zone.yaml
export BIGFLEET_LAB_ARGS="--storage-pool=$POOL --image=$GOLDEN --network=bigfleet --kernel=$BOOT_DIR/vmlinuz --initrd=$BOOT_DIR/initrd.img --cmdline=$CMDLINE --domain-type=$accel --credentials-dir=$STATE/creds"
export BIGFLEET_LAB_N=$n
export BIGFLEET_LAB_STATE=$STATE
export BIGFLEET_LAB_DATA=$DATA
export BIGFLEET_LAB_SCRIPT=$repo/scripts/lab.sh
ENV
	mv "$STATE/env.tmp" "$STATE/env"
}

# ---- up / down ---------------------------------------------------------------------
cmd_up() {
	local n=${1:-3} t0 i h out
	[[ $n =~ ^[1-9][0-9]?$ ]] || die "up N: N must be 1..99"
	t0=$(now)
	lock
	ensure_packages
	make_identities
	out=$("$here/guest/build.sh")
	GUEST_KERNEL=$(sed -n 's/^KERNEL=//p' <<<"$out")
	GUEST_INITRD=$(sed -n 's/^INITRD=//p' <<<"$out")
	# Both roots at once (cached after the first time: ~1.5 min the first).
	"$here/lab/rootfs.sh" bookworm >/dev/null 8>&- &
	local pb=$!
	"$here/lab/rootfs.sh" trixie >/dev/null 8>&- || die "the trixie root did not build"
	wait "$pb" || die "the bookworm root did not build"
	log "roots and guest ready ($(since "$t0"))"
	ensure_bridge
	write_etc_hosts "$n"
	for i in $(seq "$n"); do
		h=lab$i
		mkdir -p "$DATA/hosts/$h"
		ensure_netns "$h" "$i"
		host_creds "$h"
		stage_host "$h" "$i" "$n"
		if [ -s "$STATE/hosts/$h.pid" ] && kill -0 "$(cat "$STATE/hosts/$h.pid")" 2>/dev/null; then continue; fi
		start_host "$h" "$i"
	done
	for i in $(seq "$n"); do
		h=lab$i
		wait_host "$h"
		libvirt_objects "$h"
		pin_hostkey "$h"
		log "$h up: libvirt $(in_host "$h" virsh -q -c qemu:///system version --daemon 2>/dev/null | sed -n 's/.*daemon: *\(.*\)/\1/p' | head -1) ($(mode_of "$i"))"
	done
	write_env "$n"
	log "up: $n hosts in $(since "$t0"); env file $STATE/env"
	cat "$STATE/env"
}

stop_host() { # HOST: kill its PID namespace (every process of the host)
	local h=$1 p k
	p=$(cat "$STATE/hosts/$h.pid" 2>/dev/null) || return 0
	stop_netdelay "$h"
	kill -KILL "$p" 2>/dev/null || true
	for k in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
	rm -f "$STATE/hosts/$h.pid"
}

cmd_down() {
	local t0 h ns
	t0=$(now)
	lock
	for h in $(hosts_up); do stop_host "$h"; done
	for ns in $(ip netns list | awk '$1 ~ /^bflab-/ {print $1}'); do ip netns del "$ns"; done
	for h in $(ip -o link show | awk -F': ' '$2 ~ /^bfl-/ {sub(/@.*/, "", $2); print $2}'); do ip link del "$h" 2>/dev/null || true; done
	ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
	if grep -q "$HOSTS_MARK\$" /etc/hosts; then
		local tmp; tmp=$(mktemp); grep -v "$HOSTS_MARK\$" /etc/hosts >"$tmp"; cat "$tmp" >/etc/hosts; rm -f "$tmp"
	fi
	rm -rf "$DATA/hosts"
	rm -rf "$STATE" "$DATA"
	log "down in $(since "$t0")"
}

# check-clean: nothing of the lab is left on the machine (after down):
# no namespace, veth, bridge, process, mount, /etc/hosts line or directory.
cmd_check_clean() {
	local left=()
	ip netns list | grep '^bflab-' >/dev/null && left+=("network namespaces: $(ip netns list | awk '/^bflab-/{print $1}' | tr '\n' ' ')")
	ip -o link show | grep -E ': (bfl-|'"$BRIDGE"'[:@])' >/dev/null && left+=("links: $(ip -o link show | awk -F': ' '$2 ~ /^(bfl-|bflab0)/ {print $2}' | tr '\n' ' ')")
	pgrep -f "$DATA/hosts|scripts/lab/host-init.sh|$STATE/netdelay" >/dev/null && left+=("processes: $(pgrep -f "$DATA/hosts|scripts/lab/host-init.sh|$STATE/netdelay" | tr '\n' ' ')")
	grep -q "$DATA" /proc/mounts && left+=("mounts under $DATA")
	grep -q "$HOSTS_MARK\$" /etc/hosts && left+=("/etc/hosts lines")
	[ -e "$STATE" ] && left+=("$STATE")
	[ -e "$DATA" ] && left+=("$DATA")
	getent passwd bigfleet >/dev/null && left+=("a bigfleet user on the machine")
	if [ ${#left[@]} -gt 0 ]; then
		printf 'lab: left behind: %s\n' "${left[@]}" >&2
		return 1
	fi
	log "check-clean: nothing of the lab is left"
}

cmd_status() {
	local h p
	[ -s "$STATE/env" ] || { echo "lab is down"; return 0; }
	for h in $(ls "$STATE/hosts" 2>/dev/null | sed -n 's/\.off$//p'); do
		printf '%-6s OFF (fault poweroff; poweron or heal boots it)\n' "$h"
	done
	for h in $(hosts_up); do
		p=$(cat "$STATE/hosts/$h.pid")
		if kill -0 "$p" 2>/dev/null; then
			printf '%-6s up   pid %-7s libvirtd %s  faults: %s\n' "$h" "$p" "$(in_host "$h" bigfleet-lab-daemon pid 2>/dev/null || echo down)" \
				"$(ip netns exec "bflab-$h" iptables -S BFLAB 2>/dev/null | grep -c '^-A' || true)"
		else
			printf '%-6s DOWN (init pid %s gone)\n' "$h" "$p"
		fi
	done
}

. "$here/lab/faults.sh"

case "${1:-}" in
up) shift; cmd_up "$@" ;;
down) cmd_down ;;
status) cmd_status ;;
env) cat "$STATE/env" ;;
check-clean) cmd_check_clean ;;
exec) shift; h=${1:?host}; shift; in_host "$h" "$@" ;;
fault) shift; lock; cmd_fault "$@" ;;
heal) shift; lock; cmd_heal "${1:?host}" ;;
*) echo "usage: $0 up [N]|down|status|env|exec HOST CMD...|fault HOST KIND [ARG]|heal HOST" >&2; exit 2 ;;
esac
