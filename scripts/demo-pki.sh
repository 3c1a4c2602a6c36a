#!/bin/bash
# scripts/demo-pki.sh DIR: a throwaway mTLS PKI for the demos (admin writes
# need mTLS and --admin-clients): DIR/ca.pem, the provider's certificate
# for 127.0.0.1 (server.pem, server-key.pem), the admin client
# bigfleet://admin (admin.pem, admin-key.pem) and the shard client
# bigfleet://shard/demo (shard.pem, shard-key.pem), valid for a day.
set -euo pipefail
d=${1:?usage: demo-pki.sh DIR}
mkdir -p "$d"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=demo-ca \
	-keyout "$d/ca-key.pem" -out "$d/ca.pem" 2>/dev/null
issue() { # name cn ext
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$2" \
		-keyout "$d/$1-key.pem" -out "$d/$1.csr" 2>/dev/null
	openssl x509 -req -in "$d/$1.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" -CAcreateserial -days 1 \
		-extfile <(printf '%s\n' "$3") -out "$d/$1.pem" 2>/dev/null
}
issue server 127.0.0.1 'subjectAltName=IP:127.0.0.1
extendedKeyUsage=serverAuth'
# BigFleet's identities (ADR-0048/0060): the admin tooling
# (bigfleet://admin: reads and, with --admin-write, the admin writes) and
# one shard, "demo", whose lifecycle calls carry shard_id demo.
issue admin demo-admin 'subjectAltName=URI:bigfleet://admin,DNS:demo-admin
extendedKeyUsage=clientAuth'
issue shard demo-shard 'subjectAltName=URI:bigfleet://shard/demo,DNS:demo-shard
extendedKeyUsage=clientAuth'
