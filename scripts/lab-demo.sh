#!/bin/bash
# The lab (docs/lab.md) served by one bin/libvirt, each lab host its own
# zone, reached over qemu+tls or qemu+libssh on libvirt 9.0 or 11.3. Shows,
# each step timed:
#   1. the provider on the lab (mTLS, admin writes for this demo's client),
#      its hosts table, every host connected;
#   2. one machine on each host at once (so each transport and each libvirt
#      version): Create → Configure (64 KiB blob) → Drain → Delete, then a
#      table of the step times per host;
#   3. lab2 partitioned for 30 s (every packet dropped): every 2 s what the
#      provider reports for lab2 and its machine, while a Configure on lab1
#      is served meanwhile; then lab2 healed, how long until the provider
#      has it connected again, and both machines deleted.
# Exits non-zero, naming the step that failed. The lab must be up (make
# lab-demo brings it up with lab-up) and is left up. Other runs may share
# the lab: this demo's provider is "labdemo" (its domains and volumes are
# bf-labdemo-*), and cleanup removes only those, heals lab2 if it was
# partitioned here, and stops the provider. LAB_DEMO_PORT (default 9420)
# moves its listener; LAB_DEMO_LOG=FILE keeps the provider's log.
set -euo pipefail
cd "$(dirname "$0")/.."
LAB_ENV=${BIGFLEET_LAB_ENV:-/run/bigfleet-lab/env}
[ -s "$LAB_ENV" ] || { echo "lab-demo: no lab ($LAB_ENV): run make lab-up (or make lab-demo)" >&2; exit 1; }
# shellcheck disable=SC1090
source "$LAB_ENV"
LAB=${BIGFLEET_LAB_SCRIPT:-scripts/lab.sh}

name=labdemo # --provider: its domains and volumes are bf-labdemo-*
addr=127.0.0.1:${LAB_DEMO_PORT:-9420}
partition_host=lab2 # partitioned in step 3
served_host=lab1    # serves a Configure meanwhile
partition_secs=30
work=$(mktemp -d)
step="setup"
t0=$(date +%s.%N)
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="${2:-$(now)}" 'BEGIN{printf "%.1fs", b-a}'; } # secs START [END]
stamp() { awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%7.2fs", b-a}'; }
say() { echo "[$(stamp)] $*"; }

# fail MSG: in the script, says which step failed, shows the provider's log
# and exits 1 (cleanup runs); in a background subshell of step 2, writes MSG
# to its $failfile and ends the subshell.
fail() {
	if [ "$BASHPID" != "$$" ]; then
		echo "${substep:+$substep: }$*" >"${failfile:-/dev/stderr}"
		exit 1
	fi
	echo "lab-demo: FAILED at step $step: $*" >&2
	provider_log
	reported=1
	exit 1
}
provider_log() {
	[ -s "$work/provider.log" ] || return 0
	echo "--- last 30 lines of the provider's log ---" >&2
	tail -n 30 "$work/provider.log" >&2 || true
}

# One lab-demo at a time: two would share the provider name and the port.
# Nothing long-lived may inherit the lock: the provider and every lab.sh
# call (a heal can start a host's daemon) get 9>&-.
exec 9>/tmp/bf-lab-demo.lock
flock -w 900 9 || fail "another lab-demo holds /tmp/bf-lab-demo.lock"

mapfile -t hosts < <(sed -n 's/^ *- name: *//p' "$BIGFLEET_LAB_HOSTS")
n=${BIGFLEET_LAB_N:-${#hosts[@]}}
[ "${#hosts[@]}" = "$n" ] || fail "$BIGFLEET_LAB_HOSTS has ${#hosts[@]} hosts, BIGFLEET_LAB_N is $n"
[ "$n" -ge 2 ] || fail "the demo wants at least 2 lab hosts, the lab has $n"

# sweep: remove this demo's bf-labdemo-* domains and volumes on every lab
# host, as root inside the host; says what it removed. Nothing else.
sweep() {
	local h out
	local script='v="virsh -q -c qemu:///system"; p="^bf-'"$name"'-"
for d in $($v list --all --name | grep "$p"); do $v destroy "$d" >/dev/null 2>&1; $v undefine --nvram "$d" >/dev/null 2>&1 || $v undefine "$d" >/dev/null 2>&1; echo "domain $d"; done
for x in $($v vol-list bigfleet | awk "{print \$1}" | grep "$p"); do $v vol-delete --pool bigfleet "$x" >/dev/null 2>&1; echo "volume $x"; done; true'
	for h in "${hosts[@]}"; do
		if out=$(timeout 120 "$LAB" exec "$h" sh -c "$script" 2>&1 9>&-); then
			[ -z "$out" ] || sed "s/^/lab-demo: $1: removed on $h: /" <<<"$out" >&2
		else
			echo "lab-demo: $1: sweep of $h failed: $out" >&2
		fi
	done
}

faulted=
cleanup() {
	local rc=$? j
	trap - EXIT INT TERM
	# A command that failed under set -e, or a signal: still name the step.
	if [ "$rc" != 0 ] && [ -z "${reported:-}" ]; then
		echo "lab-demo: FAILED at step $step (exit status $rc)" >&2
		provider_log
	fi
	if [ -n "$faulted" ]; then
		timeout 900 "$LAB" heal "$partition_host" >/dev/null 2>&1 9>&- ||
			echo "lab-demo: cleanup: heal $partition_host FAILED: it may still be partitioned (scripts/lab.sh heal $partition_host)" >&2
	fi
	for j in $(jobs -p); do
		pkill -P "$j" 2>/dev/null || true
		kill "$j" 2>/dev/null || true
	done
	if [ -n "${pid:-}" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	sweep cleanup
	if [ -n "${LAB_DEMO_LOG:-}" ] && [ -e "$work/provider.log" ]; then
		cp "$work/provider.log" "$LAB_DEMO_LOG" && echo "lab-demo: the provider's log is in $LAB_DEMO_LOG" >&2
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

sweep "leftover of an earlier run"

# Client certificates: the admin writes (cordon, …) need mTLS and a name on
# --admin-clients (by default bigfleet://admin); lifecycle calls need a
# shard's certificate (--caller-identity=bigfleet, the default under mTLS).
scripts/demo-pki.sh "$work/pki" || fail "could not make the demo's PKI"
# Lifecycle calls are a shard's (its certificate names the token's shard,
# libvirtctl stamps the sequence); the rest is the admin tooling's.
ctl() {
	local who=admin
	case "${1:-}" in create | configure | drain | delete) who=shard ;; esac
	bin/libvirtctl --addr "$addr" --tls-ca "$work/pki/ca.pem" --tls-cert "$work/pki/$who.pem" \
		--tls-key "$work/pki/$who-key.pem" "$@"
}

echo '[{"name":"lab.tiny","vcpu":1,"memory_mib":256}]' >"$work/types.json"
{
	sep=
	printf '['
	for i in $(seq "$n"); do
		printf '%s{"instance_type":"lab.tiny","zone":"lab%d","capacity_type":"on_demand","count":2}' "$sep" "$i"
		sep=,
	done
	printf ']\n'
} >"$work/offerings.json"

# Other runs fault the lab's hosts: wait until none has a fault rule or a
# stopped libvirtd, so that what follows shows this demo's doing.
step="0 (the lab free of other runs' faults)"
busy() { "$LAB" status 9>&- | awk '$2 != "up" || $6 == "down" || $NF != 0 {print $1 ($2 != "up" ? " down" : $6 == "down" ? " libvirtd down" : " " $NF " fault rules")}' | paste -sd, -; }
w=$(now)
end=$(($(date +%s) + 900))
while b=$(busy) && [ -n "$b" ]; do
	[ -n "${waited:-}" ] || say "0. waiting for other runs' faults to go: $b"
	waited=1
	[ "$(date +%s)" -lt "$end" ] || fail "still faulted after 900s: $b"
	sleep 2
done
[ -z "${waited:-}" ] || say "   the lab is free of faults after $(secs "$w")"
waited=

step="1 (provider start)"
say "1. starting bin/libvirt --provider $name on $addr (mTLS) for the lab's $n hosts, one zone each"
s=$(now)
# shellcheck disable=SC2086 # BIGFLEET_LAB_ARGS is a list of flags
bin/libvirt --addr "$addr" --metrics-addr= --provider "$name" --hosts "$BIGFLEET_LAB_HOSTS" $BIGFLEET_LAB_ARGS \
	--instance-types "$work/types.json" --offerings "$work/offerings.json" \
	--tls-cert "$work/pki/server.pem" --tls-key "$work/pki/server-key.pem" --tls-ca "$work/pki/ca.pem" \
	--admin-write --reconcile-interval 2s --log-format text \
	>"$work/provider.out" 2>"$work/provider.log" 9>&- &
pid=$!
# It serves once it has dialled every host (a host that does not answer
# holds it up to its dial timeout, minutes for SSH).
end=$(($(date +%s) + 300))
until ctl list >/dev/null 2>&1; do
	kill -0 "$pid" 2>/dev/null || fail "the provider exited at startup"
	[ "$(date +%s)" -lt "$end" ] || fail "the provider did not serve within 300s"
	sleep 0.2
done
say "  serving after $(secs "$s")"
# connected: how many hosts `libvirtctl hosts` says are connected (it asks
# every host, and waits up to 20s for one that does not answer).
connected() { timeout 60 bin/libvirtctl --addr "$addr" --tls-ca "$work/pki/ca.pem" --tls-cert "$work/pki/admin.pem" \
	--tls-key "$work/pki/admin-key.pem" hosts -o json 2>/dev/null | grep -c '"connected": *true' || true; }
end=$(($(date +%s) + 180))
until [ "$(connected)" = "$n" ]; do
	[ "$(date +%s)" -lt "$end" ] || fail "not every host connected within 180s: $(ctl hosts 2>&1)"
	sleep 0.2
done
say "  all $n hosts connected after $(secs "$s"):"
ctl hosts | sed 's/^/    /'

# hcol HOST COLUMN: one cell of `libvirtctl hosts` (cells are apart by 2+
# spaces); empty when the call fails or does not answer within a minute.
hcol() {
	timeout 60 bin/libvirtctl --addr "$addr" --tls-ca "$work/pki/ca.pem" --tls-cert "$work/pki/admin.pem" \
		--tls-key "$work/pki/admin-key.pem" hosts 2>/dev/null |
		awk -F '   *' -v h="$1" -v c="$2" 'NR==1{for(i=1;i<=NF;i++) if($i==c) k=i; next} k && $2==h{print $k}' || true
}
# field ID NAME: one row of `libvirtctl get` (empty for "-").
field() {
	local val
	val=$(timeout 10 bin/libvirtctl --addr "$addr" --tls-ca "$work/pki/ca.pem" --tls-cert "$work/pki/admin.pem" \
		--tls-key "$work/pki/admin-key.pem" get "$1" 2>/dev/null | sed -n "s/^$2 \{2,\}//p" | head -n 1) || true
	[ "$val" = - ] && val=
	echo "$val"
}
# wait_state ID SECONDS STATE...: until the machine is in one of the states.
wait_state() {
	local id=$1 limit=$2 s= end
	shift 2
	end=$(($(date +%s) + limit))
	while [ "$(date +%s)" -lt "$end" ]; do
		s=$(field "$id" state)
		for want in "$@"; do [ "$s" = "$want" ] && return 0; done
		sleep 0.2
	done
	fail "$id stuck in ${s:-?} for ${limit}s, waiting for $*"
}
# slot ZONE: a SPECULATIVE machine of ZONE.
slot() { ctl list --state SPECULATIVE --zone "$1" | awk 'NR>1{print $1; exit}'; }
# mutate ID VERB TARGET LIMIT [ARGS...]: the lifecycle call, then wait for
# TARGET; sets took to the time from the start of the accepted call to
# TARGET. FAILED fails. Other runs share the lab and fault its hosts: a call
# refused because the machine's host is unavailable is tried again every
# 2s for up to 3 minutes, and says so.
mutate() {
	local id=$1 verb=$2 target=$3 limit=$4 s out w
	shift 4
	w=$(now)
	s=$w
	until out=$(ctl "$verb" "$id" "$@" 2>&1); do
		case $out in
		*unavailable*) kill -0 "$pid" 2>/dev/null || fail "$verb $id: the provider exited: $out" ;;
		*) fail "$verb $id refused: $out" ;;
		esac
		awk -v a="$w" -v b="$(now)" 'BEGIN{exit !(b-a>180)}' && fail "$verb $id refused for 180s: $out"
		[ -n "${retried:-}" ] || say "  $verb $id refused ($out); trying again every 2s"
		retried=1
		sleep 2
		s=$(now)
	done
	[ -z "${retried:-}" ] || say "  $verb $id accepted after $(secs "$w") of refusals"
	retried=
	wait_state "$id" "$limit" "$target" FAILED
	[ "$(field "$id" state)" = "$target" ] || fail "$verb $id went FAILED: $(field "$id" 'last error')"
	took=$(secs "$s")
}
# about HOST: "tls, libvirt 9.0.0"
about() {
	local uri ver
	uri=$(hcol "$1" URI)
	ver=$(hcol "$1" LIBVIRT)
	uri=${uri%%://*}
	echo "${uri#qemu+}, libvirt $ver"
}

step="2 (lifecycle on every host)"
say "2. one machine on each host at once: Create → Configure (64 KiB blob) → Drain → Delete"
declare -A mid info
for h in "${hosts[@]}"; do
	mid[$h]=$(slot "$h")
	[ -n "${mid[$h]}" ] || fail "no SPECULATIVE machine in zone $h"
	info[$h]=$(about "$h")
	head -c 65536 /dev/urandom >"$work/blob.$h"
done
# lifecycle HOST: in a subshell; each step's time to $work/res.HOST.
lifecycle() {
	local h=$1 id=${mid[$1]}
	failfile=$work/fail.$h
	: >"$work/res.$h"
	for substep in create configure drain delete; do
		case $substep in
		create) mutate "$id" create IDLE 600 ;;
		configure) mutate "$id" configure CONFIGURED 600 --cluster demo --blob-file "$work/blob.$h" ;;
		drain) mutate "$id" drain IDLE 300 --grace 0 ;;
		delete) mutate "$id" delete SPECULATIVE 300 ;;
		esac
		echo "$substep $took" >>"$work/res.$h"
		say "  $h: $id $substep took $took"
	done
}
s=$(now)
declare -A job
for h in "${hosts[@]}"; do
	lifecycle "$h" &
	job[$h]=$!
done
failed=
for h in "${hosts[@]}"; do
	wait "${job[$h]}" || failed+="${failed:+; }$h $(cat "$work/fail.$h" 2>/dev/null || echo "exited")"
done
say "  all hosts done in $(secs "$s"):"
for h in "${hosts[@]}"; do
	line=$(printf '%-30s' "$h (${info[$h]})")
	while read -r st t; do line+=$(printf '  %s %6s' "$st" "$t"); done <"$work/res.$h"
	echo "    $line"
done
[ -z "$failed" ] || fail "$failed"

step="3 (partition $partition_host for ${partition_secs}s)"
p=$partition_host
q=$served_host
say "3. partition $p for ${partition_secs}s while $q serves a Configure"
mp=$(slot "$p")
mq=$(slot "$q")
[ -n "$mp" ] && [ -n "$mq" ] || fail "no SPECULATIVE machine in zone $p or $q"
s=$(now)
(failfile=$work/fail.create-p; mutate "$mp" create IDLE 600) &
cp=$!
(failfile=$work/fail.create-q; mutate "$mq" create IDLE 600) &
cq=$!
wait "$cp" || fail "$(cat "$work/fail.create-p" 2>/dev/null || echo "Create $mp on $p")"
wait "$cq" || fail "$(cat "$work/fail.create-q" 2>/dev/null || echo "Create $mq on $q")"
say "  $mp on $p and $mq on $q are IDLE ($(secs "$s"))"
# Another run's fault on $p would blur what this partition shows, and the
# heal here would remove it: wait until $p has none and is connected.
faults_of() { "$LAB" status 9>&- | awk -v h="$1" '$1==h{print $NF}'; }
w=$(now)
while f=$(faults_of "$p") && ! { [ "$f" = 0 ] && [ "$(hcol "$p" CONNECTED)" = yes ]; }; do
	[ -n "${waited:-}" ] || say "  $p has another run's fault ($f rules) or is not connected; waiting"
	waited=1
	awk -v a="$w" -v b="$(now)" 'BEGIN{exit !(b-a>600)}' && fail "$p still faulted by another run or disconnected after 600s"
	sleep 2
done
[ -z "${waited:-}" ] || say "  $p free of faults and connected after $(secs "$w")"
head -c 65536 /dev/urandom >"$work/blob.partition"

# The lab's faults take its lock (/run/bigfleet-lab/.lock), which other
# runs on the lab hold meanwhile; a minute is plenty.
timeout 120 "$LAB" fault "$p" partition 9>&- ||
	fail "lab.sh fault $p partition failed or did not return within 120s (is the lab's lock held?)"
faulted=1
tf=$(now)
say "  $p partitioned (every packet to and from it dropped); the provider's view every 2s:"

# The Configure on the healthy host, at once, in the background: its
# outcome, the time from the call and the time since the fault go to
# $work/served.
(
	failfile=$work/served.fail
	s=$(now)
	out=$(ctl configure "$mq" --cluster demo --blob-file "$work/blob.partition" 2>&1) ||
		{ echo "refused $(secs "$s") $(secs "$tf") $out" >"$work/served"; exit 0; }
	wait_state "$mq" 600 CONFIGURED FAILED
	echo "$(field "$mq" state) $(secs "$s") $(secs "$tf")" >"$work/served"
) &
served_job=$!
served_done=
# announce_served [NOTE]: says, once, how the Configure on $q ended.
announce_served() {
	local st took at
	[ -z "$served_done" ] && [ -s "$work/served" ] || return 0
	served_done=1
	read -r st took at _ <"$work/served"
	case $st in
	CONFIGURED) say "  >> $q served meanwhile: Configure $mq → CONFIGURED in $took, done $at after the fault${1:-}" ;;
	*) fail "Configure $mq on $q during the partition: $(cat "$work/served") $(field "$mq" 'last error')" ;;
	esac
}

# What the provider says about $p comes from `libvirtctl hosts`, which asks
# every host: while $p is silent that call can wait for it. So the hosts
# table is asked in the background every second, and each report shows the
# newest answer, when it was asked and how long it took. Probe K writes
# "ASKED TOOK CONNECTED<tab>LAST_ERROR" for $p (ASKED counted from the
# fault; CONNECTED yes, no or none when the call failed), from the JSON
# form of the table, whose last_error is not cut short.
probe() {
	local s js conn err
	s=$(now)
	js=$(timeout 60 bin/libvirtctl --addr "$addr" --tls-ca "$work/pki/ca.pem" --tls-cert "$work/pki/admin.pem" \
		--tls-key "$work/pki/admin-key.pem" hosts -o json 2>/dev/null |
		tr -d '\n' | sed 's/"zone": */\n/g' | grep -E "\"name\": *\"$p\"") || true
	conn=none err=
	if [ -n "$js" ]; then
		conn=no
		grep -qE '"connected": *true' <<<"$js" && conn=yes
		err=$(sed -nE 's/.*"last_error": *"(([^"\\]|\\.)*)".*/\1/p' <<<"$js" | sed 's/\\"/"/g')
	fi
	printf '%s %s %s\t%s\n' "$(secs "$tf" "$s")" "$(secs "$s")" "$conn" "$err" >"$work/probe.$1.tmp"
	mv "$work/probe.$1.tmp" "$work/probe.$1"
}
probes=0 # probes started
shown=0  # newest probe reported
declare -A asked_at
probe_jobs=()
start_probe() {
	probes=$((probes + 1))
	asked_at[$probes]=$(now)
	probe "$probes" &
	probe_jobs+=($!)
}
# view: sets vtext to what the newest answer since the last report says
# of $p, and verr to $p's last error when it changed (not in a subshell:
# it keeps shown and the last error).
last_err=
view() {
	local k asked took conn err
	verr=
	for ((k = probes; k > shown; k--)); do
		[ -s "$work/probe.$k" ] || continue
		shown=$k
		IFS=$'\t' read -r asked err <"$work/probe.$k"
		read -r asked took conn <<<"$asked"
		case $conn in
		none) vtext="hosts: the call asked at +$asked failed after $took" ;;
		*) vtext="hosts: $p CONNECTED $conn (asked at +$asked, answered in $took)" ;;
		esac
		if [ "$conn" != none ] && [ "$err" != "$last_err" ]; then
			last_err=$err
			verr=${err:-(none)}
		fi
		return 0
	done
	for ((k = shown + 1; k <= probes; k++)); do
		[ -s "$work/probe.$k" ] && continue
		vtext="hosts: no answer yet (the oldest call waiting was asked $(secs "${asked_at[$k]}") ago)"
		return 0
	done
	vtext="hosts: no answer yet"
}
# report SINCE LABEL: one line of what the provider says.
report() {
	view
	say "  +$(printf '%5s' "$(secs "$1")")$2  $vtext  |  $(machine_view)"
	[ -z "$verr" ] || say "          $p's last error is now: $verr"
}
machine_view() {
	local st err
	st=$(field "$mp" state)
	err=$(field "$mp" 'last error')
	echo "$mp ${st:-(no answer)}, last error: ${err:--}  |  $mq $(field "$mq" state)"
}
# log_events T0 LABEL: the provider's log lines since the last call that
# say a host's link changed (connected, lost, unreachable, refused), with
# their time since T0 (by the log's timestamps) and LABEL.
log_seen=0
log_events() {
	local base=$1 label=$2 t h m w n
	n=$(wc -l <"$work/provider.log")
	while IFS=$'\t' read -r t h m w; do
		t=$(date -d "$t" +%s.%N 2>/dev/null) || continue
		say "  provider log at $(awk -v a="$base" -v b="$t" 'BEGIN{printf "%.1fs", b-a}') $label: $h: $m${w:+ ($w)}"
	done < <(sed -n "$((log_seen + 1)),${n}p" "$work/provider.log" |
		awk '/msg="libvirt host (connection lost|unreachable|connected|refused)/ {
			t=$0; sub(/^time=/,"",t); sub(/ .*/,"",t)
			m=$0; sub(/.*msg="/,"",m); sub(/".*/,"",m)
			h="?"; if (match($0, / host=[^ ]+/)) h=substr($0, RSTART+6, RLENGTH-6)
			w=""; if (match($0, / (why|err)="([^"\\]|\\.)*"/)) { w=substr($0, RSTART+1, RLENGTH-1); gsub(/\\"/, "\"", w) }
			printf "%s\t%s\t%s\t%s\n", t, h, m, w }')
	log_seen=$n
}
# at T: sleep until T (seconds since the epoch, fractional).
at() { sleep "$(awk -v a="$1" -v b="$(now)" 'BEGIN{d=a-b; printf "%.3f", (d>0 ? d : 0)}')"; }
plus() { awk -v a="$1" -v d="$2" 'BEGIN{printf "%.3f", a+d}'; }

log_events "$tf" "" >/dev/null # only what comes after the fault
start_probe
for k in $(seq 1 "$partition_secs"); do
	at "$(plus "$tf" "$k")"
	if [ $((k % 2)) = 0 ]; then
		log_events "$tf" "after the fault"
		report "$tf" ""
		announce_served
	fi
	[ "$k" = "$partition_secs" ] || start_probe
done
log_events "$tf" "after the fault"
timeout 120 "$LAB" heal "$p" 9>&- || fail "lab.sh heal $p failed or did not return within 120s (is the lab's lock held?)"
faulted=
th=$(now)
heal_probe=$((probes + 1))
say "  $p healed, after $(secs "$tf") of partition; waiting for the provider to report it connected:"
step="3 ($p reconnect after the heal)"
# reconnected: the earliest answer of a probe asked after the heal that
# says yes, as "SECONDS_AFTER_HEAL PROBE" ("" when none yet).
reconnected() {
	local k asked took cell
	for ((k = heal_probe; k <= probes; k++)); do
		[ -s "$work/probe.$k" ] || continue
		read -r asked took cell _ <"$work/probe.$k"
		[ "$cell" = yes ] || continue
		awk -v a="$asked" -v t="$took" -v f="$tf" -v h="$th" -v k="$k" \
			'BEGIN{sub(/s$/,"",a); sub(/s$/,"",t); printf "%.1f %d\n", f+a+t-h, k}'
	done | sort -n | head -n 1
}
k=0
while :; do
	k=$((k + 1))
	start_probe
	at "$(plus "$th" "$k")"
	r=$(reconnected)
	[ -n "$r" ] && break
	if [ $((k % 2)) = 0 ]; then
		log_events "$th" "after the heal"
		report "$th" " after the heal"
	fi
	announce_served " (after the heal)"
	[ "$k" -lt 180 ] || fail "$p not reported connected 180s after the heal (last error: ${last_err:-none})"
done
read -r after kr <<<"$r"
read -r asked took _ _ <"$work/probe.$kr"
log_events "$th" "after the heal"
say "  >> $p reported connected again ${after}s after the heal (hosts asked at +$asked, answered in $took)"
step="3 (the Configure on $q)"
wait "$served_job" || true
[ -s "$work/served" ] || fail "Configure $mq: $(cat "$work/served.fail" 2>/dev/null || echo "no outcome")"
announce_served " (after the heal)"
for j in "${probe_jobs[@]}"; do wait "$j" 2>/dev/null || true; done

step="3 (delete both machines)"
wait_state "$mp" 120 IDLE
mutate "$mp" delete SPECULATIVE 300
say "  Delete $mp (on $p) took $took"
mutate "$mq" drain IDLE 300 --grace 0
say "  Drain $mq (on $q) took $took"
mutate "$mq" delete SPECULATIVE 300
say "  Delete $mq (on $q) took $took"
step="end"
say "lab-demo passed: the lifecycle on $n hosts (tls and libssh, libvirt 9.0 and 11.3), a ${partition_secs}s partition of $p while $q served"
