#!/bin/bash
# The lab's identities, minted as an operator would (docs/credentials.md):
#   pki.sh ca DIR                       lab CA (DIR/ca.pem, DIR/ca.key), once
#   pki.sh server DIR NAME IP OUT       server+client certificate of a lab host
#                                       (libvirt TLS listener and QEMU's
#                                       migration TLS): OUT/{cert,key}.pem
#   pki.sh client DIR SUBJECT OUT       a libvirt client: OUT/{cacert,clientcert,clientkey}.pem
#                                       (a pkipath directory)
#   pki.sh ssh-key OUT                  the provider's SSH key: OUT/id_ed25519{,.pub}
# RSA keys: libvirt's certificate sanity check wants keyEncipherment.
set -euo pipefail
cmd=$1; shift
days=30

key() { openssl genrsa -out "$1" 2048 2>/dev/null; chmod 0600 "$1"; }

# sign DIR CSR OUT EXTFILE
sign() {
	openssl x509 -req -in "$2" -CA "$1/ca.pem" -CAkey "$1/ca.key" -CAcreateserial \
		-days $days -sha256 -extfile "$4" -out "$3" 2>/dev/null
}

case "$cmd" in
ca)
	dir=$1
	[ -s "$dir/ca.pem" ] && exit 0
	mkdir -p "$dir"; chmod 0700 "$dir"
	key "$dir/ca.key"
	openssl req -x509 -new -key "$dir/ca.key" -days $days -sha256 -subj "/O=BigFleet Lab/CN=${CA_CN:-BigFleet lab CA}" \
		-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign -out "$dir/ca.pem"
	;;
server)
	dir=$1 name=$2 ip=$3 out=$4
	mkdir -p "$out"
	key "$out/key.pem"
	openssl req -new -key "$out/key.pem" -subj "/O=BigFleet Lab/CN=$name" -out "$out/req.csr"
	ext=$(mktemp)
	printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
		"extendedKeyUsage=serverAuth,clientAuth" "subjectAltName=DNS:$name,IP:$ip" >"$ext"
	sign "$dir" "$out/req.csr" "$out/cert.pem" "$ext"
	rm -f "$ext" "$out/req.csr"
	;;
client)
	dir=$1 subj=$2 out=$3
	mkdir -p "$out"
	key "$out/clientkey.pem"
	openssl req -new -key "$out/clientkey.pem" -subj "$subj" -out "$out/req.csr"
	ext=$(mktemp)
	printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
		"extendedKeyUsage=clientAuth" >"$ext"
	sign "$dir" "$out/req.csr" "$out/clientcert.pem" "$ext"
	cp "$dir/ca.pem" "$out/cacert.pem"
	rm -f "$ext" "$out/req.csr"
	;;
ssh-key)
	out=$1
	mkdir -p "$out"
	[ -s "$out/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C bigfleet-provider-lab -f "$out/id_ed25519"
	;;
*) echo "usage: pki.sh ca|server|client|ssh-key ..." >&2; exit 2 ;;
esac
