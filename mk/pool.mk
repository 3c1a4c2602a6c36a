# Issue 12: a zone of two real libvirt hosts on this machine (docs/pools.md).
# The system libvirtd (scripts/libvirt-env.sh) and a session libvirtd run as
# user bfhost2 (scripts/libvirt-second-host.sh); both targets bring the
# second host up and take it down again, whatever happened, leaving the
# machine as found. They touch the real libvirtd: on a shared machine run
# them under `flock /tmp/bf-real-libvirt.lock`.
HOST2_ENV := /run/bigfleet-second-host/env

.PHONY: test-pool demo-pool

# The real tests (test/integration/pool*_test.go, build tag pool):
# spread, full zone, a Create/Configure/Drain/Delete cycle on each host,
# a stopped daemon, cordon from the hosts file and through the admin API,
# a live migration between the hosts and back (TestPoolMigrate).
test-pool: deps env-up
	@mkdir -p out
	@trap 'scripts/libvirt-second-host.sh down' EXIT; \
		scripts/libvirt-second-host.sh up >/dev/null && \
		source $(ENV_FILE) && export BIGFLEET_LIBVIRT_ENV=$(ENV_FILE) BIGFLEET_HOST2_ENV=$(HOST2_ENV) && \
		$(GOTEST_PROGRESS) -count=1 -tags integration,pool -timeout 10m -run '^TestPool' ./test/integration/

# Placement across the two hosts, a cordon and the full-zone error, timed.
demo-pool: build env-up
	scripts/demo-pool.sh
