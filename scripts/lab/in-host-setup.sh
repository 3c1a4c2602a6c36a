#!/bin/bash
# /usr/local/sbin/bigfleet-lab-setup: sets a lab host up the way
# deploy/host-setup/README.md tells an operator to (copied here as
# /root/host-setup), so the documented setup is the tested one. Idempotent:
# it runs on every boot of the host. Lab-only additions are marked "lab:".
set -euo pipefail
. /etc/bigfleet-lab/host.env
hs=/root/host-setup
pki=/etc/bigfleet-lab/pki

# Section 1: the dedicated account.
getent group bigfleet >/dev/null || groupadd --system --gid 65532 bigfleet
getent passwd bigfleet >/dev/null ||
	useradd --system --uid 65532 --gid bigfleet --groups libvirt \
		--home-dir /var/lib/bigfleet --create-home --shell /bin/sh bigfleet
passwd --lock bigfleet >/dev/null
install -d -m 0700 -o bigfleet -g bigfleet /var/lib/bigfleet/.ssh

# Sections 2 and 4: libvirtd.conf, one transport per host. polkit's access
# driver cannot authorise a TLS client (README §4), so a TLS host runs
# without it and an SSH host with it.
# lab: debug logging of everything but the agent modules: the shipped
# filters stay first (the first matching filter wins), to a file of the
# host's own.
if [ "$LAB_MODE" = tls ]; then conf=$hs/libvirtd-tls.conf; else conf=$hs/libvirtd-unix-acl.conf; fi
{
	echo "# written by bigfleet-lab-setup from /root/host-setup ($LAB_MODE host)"
	sed 's/^log_filters = "\(.*\)"$/log_filters = "\1 3:event 3:object 3:util.threadjob 3:rpc.keepalive 1:*"/' "$conf"
	echo 'log_outputs = "1:file:/var/log/libvirt/libvirtd.log"'
} >/etc/libvirt/libvirtd.conf

# QEMU: no cgroups (lab hosts share this kernel's hierarchy, and two hosts
# may run the same domain name during a migration), no private /dev per
# QEMU (the host's /dev is a bind of the machine's: libvirt's own /dev for
# QEMU finds no PTY there); migration TLS from
# /etc/pki/qemu (the host's certificate, also its client certificate).
cat >/etc/libvirt/qemu.conf <<CONF
cgroup_controllers = [ ]
namespaces = [ ]
default_tls_x509_cert_dir = "/etc/pki/qemu"
default_tls_x509_verify = 1
migration_address = "0.0.0.0"
CONF

# Server identity (README §4 paths) and QEMU's migration TLS.
install -d -m 0755 /etc/pki/CA /etc/pki/libvirt /etc/pki/qemu
install -d -m 0700 /etc/pki/libvirt/private
install -m 0644 "$pki/ca.pem" /etc/pki/CA/cacert.pem
install -m 0644 "$pki/cert.pem" /etc/pki/libvirt/servercert.pem
install -m 0600 "$pki/key.pem" /etc/pki/libvirt/private/serverkey.pem
install -m 0644 "$pki/ca.pem" /etc/pki/qemu/ca-cert.pem
for role in server client; do
	install -m 0644 "$pki/cert.pem" /etc/pki/qemu/$role-cert.pem
	install -m 0640 -g libvirt-qemu "$pki/key.pem" /etc/pki/qemu/$role-key.pem
done

# Section 2: the polkit rule with the lab's pool, image and network, and an
# admin rule for root (README "Other administrators"): lab.sh manages pools
# and networks as root through the same ACLs.
sed -e 's/^var POOLS = .*/var POOLS = ["bigfleet"];/' \
	-e 's/^var IMAGES = .*/var IMAGES = ["bigfleet-golden.qcow2"];/' \
	-e 's/^var NETWORKS = .*/var NETWORKS = ["bigfleet"];/' \
	"$hs/polkit/50-bigfleet-libvirt.rules" >/etc/polkit-1/rules.d/50-bigfleet-libvirt.rules
cat >/etc/polkit-1/rules.d/40-lab-admin.rules <<'JS'
polkit.addRule(function (action, subject) {
    if (action.id.indexOf("org.libvirt.") === 0 && subject.user === "root") {
        return polkit.Result.YES;
    }
});
JS

# Section 3: sshd, key only, the account pinned to virt-ssh-helper.
[ -s /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
install -m 0644 "$hs/ssh/sshd_config.d-bigfleet.conf" /etc/ssh/sshd_config.d/bigfleet.conf
# lab: one host key type, so the provider's known_hosts pins exactly it.
printf '%s\n' "HostKey /etc/ssh/ssh_host_ed25519_key" "ListenAddress 0.0.0.0" >/etc/ssh/sshd_config.d/00-lab.conf
sed -e "s|^restrict,from=\"[^\"]*\"|restrict,from=\"$LAB_NET\"|" \
	-e "s|ssh-ed25519 .*|$(cat "$pki/provider.pub")|" \
	"$hs/ssh/authorized_keys.example" | grep -v '^#' >/var/lib/bigfleet/.ssh/authorized_keys
chown bigfleet:bigfleet /var/lib/bigfleet/.ssh/authorized_keys
chmod 0600 /var/lib/bigfleet/.ssh/authorized_keys

# lab: every lab host by name (migration dials the destination's hostname).
grep -v 'bigfleet-lab$' /etc/hosts >/etc/hosts.new || true
cat /etc/bigfleet-lab/hosts >>/etc/hosts.new
mv /etc/hosts.new /etc/hosts
[ -s /etc/machine-id ] || tr -d - </proc/sys/kernel/random/uuid >/etc/machine-id
