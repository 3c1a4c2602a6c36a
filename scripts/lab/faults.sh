# Sourced by scripts/lab.sh: the faults of a lab host (docs/lab.md#faults).
# Network faults are rules in the host's own BFLAB chain (its network
# namespace), so they cut the host off from everyone (the provider and the
# other hosts) and `heal` is one flush.

ipt() { ip netns exec "bflab-$1" iptables "${@:2}"; }

# delay: this kernel has no netem qdisc, so the packets coming into the host
# are queued to userspace (NFQUEUE) and released MS later by
# scripts/lab/netdelay; --queue-bypass lets packets through if it dies.
# Only incoming ones: holding a socket's outgoing packets starves it (TCP
# small queues: two packets per delay, ~60 KiB/s), which netem avoids by
# detaching them and userspace cannot. The round trip grows by MS either way.
netdelay_bin() {
	local bin=$STATE/netdelay
	[ -x "$bin" ] || (cd "$repo" && go build -o "$bin" ./scripts/lab/netdelay) || die "cannot build netdelay"
	echo "$bin"
}
stop_netdelay() {
	local f=$STATE/hosts/$1.netdelay p
	p=$(cat "$f" 2>/dev/null) || return 0
	kill "$p" 2>/dev/null || true
	rm -f "$f"
}
fault_delay() { # HOST MS
	local h=$1 ms=$2 i bin
	[[ $ms =~ ^[0-9]+$ ]] && [ "$ms" -gt 0 ] || die "delay MS: a positive number of milliseconds"
	i=$(index_of "$h")
	bin=$(netdelay_bin)
	stop_netdelay "$h"
	ip netns exec "bflab-$h" setsid "$bin" -queue "$i" -delay "${ms}ms" </dev/null >>"$DATA/hosts/$h/netdelay.log" 2>&1 8>&- &
	echo $! >"$STATE/hosts/$h.netdelay"
	sleep 0.3
	ipt "$h" -A BFLAB -i eth0 -j NFQUEUE --queue-num "$i" --queue-bypass
}

fault_loss() { # HOST PCT
	local h=$1 pct=$2 p
	[[ $pct =~ ^[0-9]+$ ]] && [ "$pct" -ge 1 ] && [ "$pct" -le 100 ] || die "loss PCT: 1..100"
	p=$(awk -v p="$pct" 'BEGIN{printf "%.4f", p/100}')
	ipt "$h" -A BFLAB -i eth0 -m statistic --mode random --probability "$p" -j DROP
	ipt "$h" -A BFLAB -o eth0 -m statistic --mode random --probability "$p" -j DROP
}

# reboot: every process of the host dies (daemons and guests), then it boots
# again on the same disk (its upper layer): defined domains are there, shut off.
fault_reboot() {
	local h=$1 i
	i=$(index_of "$h")
	stop_host "$h"
	ensure_netns "$h" "$i"
	start_host "$h" "$i"
	wait_host "$h"
	libvirt_objects "$h"
}

# poweroff: the host is off for good until poweron (or heal): every process
# of it dies (daemons and guests) and its address drops every packet, as a
# powered-off machine's would (no refusal, only silence). Its disk stays:
# poweron boots it with its defined domains shut off.
fault_poweroff() {
	local h=$1
	stop_host "$h"
	touch "$STATE/hosts/$h.off"
	ipt "$h" -A BFLAB -i eth0 -j DROP
	ipt "$h" -A BFLAB -o eth0 -j DROP
}

fault_poweron() {
	local h=$1 i
	i=$(index_of "$h")
	[ -e "$STATE/hosts/$h.off" ] || { log "$h: not powered off"; return 0; }
	ensure_netns "$h" "$i"
	ipt "$h" -F BFLAB
	start_host "$h" "$i"
	wait_host "$h"
	libvirt_objects "$h"
	rm -f "$STATE/hosts/$h.off"
}

# rotate-client-cert: a new key and certificate for the provider's Secret of
# HOST, replaced in place (the ..data swap of a Secret update). SUBJECT
# defaults to the allowed DN; another one tests a rotation the host refuses.
fault_rotate() {
	local h=$1 subj=${2:-$PROVIDER_DN} tmp
	[ "$(mode_of "$(index_of "$h")")" = tls ] || die "$h is not a TLS host"
	tmp=$(mktemp -d)
	"$here/lab/pki.sh" client "$STATE/pki/ca" "$subj" "$tmp"
	secret_publish "$STATE/creds/$h" "$tmp"
	rm -rf "$tmp"
}

# swap-hostkey: the host presents a new SSH host key (the old one is kept
# for heal); the provider's pinned known_hosts is left as it was.
fault_swap_hostkey() {
	local h=$1
	in_host "$h" sh -c '
		set -e
		mkdir -p /etc/ssh/lab-orig
		[ -s /etc/ssh/lab-orig/ssh_host_ed25519_key ] || cp -p /etc/ssh/ssh_host_ed25519_key* /etc/ssh/lab-orig/
		rm -f /etc/ssh/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key.pub
		ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/ssh_host_ed25519_key
		kill -HUP $(cat /run/sshd.pid)'
}

cmd_fault() {
	local h=${1:?host} kind=${2:?kind}
	index_of "$h" >/dev/null
	if [ "$kind" = poweron ]; then fault_poweron "$h"; log "$h: poweron"; return 0; fi
	[ -s "$STATE/hosts/$h.pid" ] || die "host $h is not up"
	case "$kind" in
	partition)
		ipt "$h" -A BFLAB -i eth0 -j DROP
		ipt "$h" -A BFLAB -o eth0 -j DROP ;;
	delay) fault_delay "$h" "${3:?delay MS}" ;;
	loss) fault_loss "$h" "${3:?loss PCT}" ;;
	freeze) in_host "$h" bigfleet-lab-daemon freeze ;;
	thaw) in_host "$h" bigfleet-lab-daemon thaw ;;
	kill-daemon) in_host "$h" bigfleet-lab-daemon kill ;;
	start-daemon) in_host "$h" bigfleet-lab-daemon start ;;
	reboot) fault_reboot "$h" ;;
	poweroff) fault_poweroff "$h" ;;
	rotate-client-cert) fault_rotate "$h" "${3:-}" ;;
	swap-hostkey) fault_swap_hostkey "$h" ;;
	*) die "unknown fault $kind (partition|delay MS|loss PCT|freeze|thaw|kill-daemon|start-daemon|reboot|poweroff|poweron|rotate-client-cert [SUBJECT]|swap-hostkey)" ;;
	esac
	log "$h: $kind ${3:-}"
}

# heal: powered on, no network fault, libvirtd running and not stopped, the
# original SSH host key back.
cmd_heal() {
	local h=$1
	[ -e "$STATE/hosts/$h.off" ] && fault_poweron "$h"
	[ -s "$STATE/hosts/$h.pid" ] || die "host $h is not up"
	ipt "$h" -F BFLAB
	stop_netdelay "$h"
	in_host "$h" sh -c '
		if [ -s /etc/ssh/lab-orig/ssh_host_ed25519_key ]; then
			mv -f /etc/ssh/lab-orig/ssh_host_ed25519_key* /etc/ssh/ && rmdir /etc/ssh/lab-orig
			kill -HUP $(cat /run/sshd.pid)
		fi
		bigfleet-lab-daemon thaw 2>/dev/null
		bigfleet-lab-daemon start'
	log "$h: healed"
}
