#!/bin/bash
# A real Kubernetes API server (kube-apiserver + etcd) on loopback, for the
# leader-election tests of record (issue 41). Nothing is downloaded as a
# binary: both servers are built from the Go module proxy into a per-machine
# cache keyed by version, once; a second run with the cache present returns in
# seconds. The build uses a throwaway module inside the cache, never the
# app's go.mod. Measured recipe: ../shared/KUBERNETES-API.md (cold build about
# 16 min on one core, 2.5 GB peak).
#
#   scripts/kube-apiserver.sh build        build (or reuse) the cached binaries
#   scripts/kube-apiserver.sh bin          print the cache's bin directory
#   scripts/kube-apiserver.sh up DIR       start etcd + apiserver with fresh certs
#                                          in DIR; writes DIR/kubeconfig, DIR/env
#   scripts/kube-apiserver.sh down DIR     stop what `up DIR` started
#   scripts/kube-apiserver.sh stop-api DIR / start-api DIR
#                                          stop or restart only the apiserver
#                                          (a leader cut from the API)
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
KUBE_CACHE=${KUBE_CACHE:-/var/cache/bigfleet-kube/$KUBE_VERSION}
BIN=$KUBE_CACHE/bin
GO=${GO:-go}

# The staging modules k8s.io/kubernetes requires at v0.0.0 and replaces with
# its own staging/ tree; a module outside that tree must name the published
# release of each.
STAGING="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
cloud-provider cluster-bootstrap code-generator component-base component-helpers
controller-manager cri-api cri-client cri-streaming csi-translation-lib
dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
mount-utils pod-security-admission sample-apiserver streaming"

log() { echo "kube-apiserver.sh: $*" >&2; }
die() { log "$*"; exit 1; }

build_etcd() {
	[ -x "$BIN/etcd" ] && return 0
	local mod=$KUBE_CACHE/src/etcd
	mkdir -p "$mod" "$BIN"
	cd "$mod"
	[ -f go.mod ] || "$GO" mod init bigfleet.local/etcd-build >/dev/null 2>&1
	"$GO" get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
	"$GO" build -trimpath -ldflags='-s -w' -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
	mv "$BIN/etcd.tmp" "$BIN/etcd"
}

build_apiserver() {
	[ -x "$BIN/kube-apiserver" ] && return 0
	local mod=$KUBE_CACHE/src/kube-apiserver m
	mkdir -p "$mod" "$BIN"
	cd "$mod"
	if [ ! -f go.mod ]; then
		"$GO" mod init bigfleet.local/kube-apiserver-build >/dev/null 2>&1
		for m in $STAGING; do
			"$GO" mod edit -replace "k8s.io/$m=k8s.io/$m@$STAGING_VERSION"
		done
	fi
	"$GO" get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION"
	"$GO" build -trimpath -ldflags='-s -w' -o "$BIN/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
	mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
}

cmd_build() {
	if [ -x "$BIN/etcd" ] && [ -x "$BIN/kube-apiserver" ]; then
		log "cached: $BIN"
		return 0
	fi
	mkdir -p "$KUBE_CACHE"
	# One build at a time per machine: two sessions share the cache.
	exec 9>"$KUBE_CACHE/.build.lock"
	flock 9
	local t0=$SECONDS
	log "building etcd $ETCD_VERSION and kube-apiserver $KUBE_VERSION into $BIN (cold: about 16 min on one core)"
	(build_etcd)
	(build_apiserver)
	log "built in $((SECONDS - t0)) s: $BIN"
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

gen_certs() {
	local d=$1
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=bigfleet-test-ca" \
		-keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
	openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
	openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
	# The client: O=system:masters is admin under RBAC.
	openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=bigfleet-test-admin" \
		-keyout "$d/admin.key" -out "$d/admin.csr" 2>/dev/null
	openssl x509 -req -in "$d/admin.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
		-days 2 -out "$d/admin.crt" 2>/dev/null
}

start_etcd() {
	local d=$1
	# shellcheck disable=SC1091
	. "$d/env"
	nohup "$BIN/etcd" --data-dir "$d/etcd" --name test \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "test=http://127.0.0.1:$ETCD_PEER_PORT" \
		--log-level warn >"$d/etcd.log" 2>&1 &
	echo $! >"$d/etcd.pid"
	local i
	for i in $(seq 1 100); do
		curl -fsS "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	die "etcd not healthy after 10 s; see $d/etcd.log"
}

cmd_start_api() {
	local d=${1:?usage: start-api DIR}
	d=$(cd "$d" && pwd)
	# shellcheck disable=SC1091
	. "$d/env"
	nohup "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
		--cert-dir "$d/serving" --service-cluster-ip-range 10.0.0.0/24 \
		--service-account-issuer https://kubernetes.default.svc \
		--service-account-key-file "$d/sa.pub" --service-account-signing-key-file "$d/sa.key" \
		--client-ca-file "$d/ca.crt" --authorization-mode RBAC \
		--disable-admission-plugins ServiceAccount --endpoint-reconciler-type none \
		>>"$d/apiserver.log" 2>&1 &
	echo $! >"$d/apiserver.pid"
	local i
	for i in $(seq 1 300); do
		if curl -fsS --cacert "$d/serving/apiserver.crt" --cert "$d/admin.crt" --key "$d/admin.key" \
			"https://127.0.0.1:$API_PORT/readyz" >/dev/null 2>&1 ||
			curl -fsSk --cert "$d/admin.crt" --key "$d/admin.key" \
				"https://127.0.0.1:$API_PORT/readyz" >/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$(cat "$d/apiserver.pid")" 2>/dev/null || die "kube-apiserver exited; see $d/apiserver.log"
		sleep 0.1
	done
	die "kube-apiserver not ready after 30 s; see $d/apiserver.log"
}

stop_pid() {
	local f=$1 pid i
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	kill "$pid" 2>/dev/null || true
	# A stopped apiserver takes over 2 s to exit: wait, so that a new one on
	# the same port is not answered by the old.
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$f"
}

cmd_stop_api() {
	stop_pid "${1:?usage: stop-api DIR}/apiserver.pid"
}

cmd_up() {
	local d=${1:?usage: up DIR}
	[ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/etcd" ] || die "no cached binaries in $BIN: run '$0 build' first"
	mkdir -p "$d/serving"
	d=$(cd "$d" && pwd)
	gen_certs "$d"
	cat >"$d/env" <<EOF
ETCD_PORT=$(free_port)
ETCD_PEER_PORT=$(free_port)
API_PORT=$(free_port)
EOF
	# shellcheck disable=SC1091
	. "$d/env"
	start_etcd "$d"
	cmd_start_api "$d"
	cat >"$d/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: https://127.0.0.1:$API_PORT
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    client-certificate: $d/admin.crt
    client-key: $d/admin.key
contexts:
- name: test
  context: {cluster: test, user: admin, namespace: default}
current-context: test
EOF
	echo "KUBECONFIG=$d/kubeconfig" >>"$d/env"
	log "up: https://127.0.0.1:$API_PORT (kubeconfig $d/kubeconfig)"
}

cmd_down() {
	local d=${1:?usage: down DIR}
	stop_pid "$d/apiserver.pid"
	stop_pid "$d/etcd.pid"
}

case ${1:-} in
build) cmd_build ;;
bin) echo "$BIN" ;;
up) cmd_up "${2:-}" ;;
down) cmd_down "${2:-}" ;;
stop-api) cmd_stop_api "${2:-}" ;;
start-api) cmd_start_api "${2:-}" ;;
*) die "usage: $0 build|bin|up DIR|down DIR|stop-api DIR|start-api DIR" ;;
esac
