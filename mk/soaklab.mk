# Issue 31: the chaos soak on the lab of remote libvirt hosts
# (test/soaklab, docs/reliability.md "Lab chaos soak"): bin/libvirt over
# two zones of two lab hosts (libvirt 9.0 and 11.3, qemu+tls and
# qemu+libssh), two fenced shards with their own certificates, live
# migrations, and overlapping faults on the hosts and the provider. It
# brings 4 lab hosts up and takes the lab down at the end, whatever
# happened, like test-lab. The short run (42 faults; 6.5 min measured with
# build and lab up and down) is a stage of make test, after test-lab
# (docs/reliability.md "Results"); SOAK_MINUTES=N makes the long run.
# SOAK_SEED replays a run's draws. The provider runs on the private libvirt
# 11.3 client (scripts/libvirt-client.sh, as the image ships and test-lab's
# wedge tests use): Debian 12's 9.0 client can crash the process in cgo
# when a daemon freezes under calls (docs/libvirt-client.md; seen here as a
# SIGSEGV in virConnectGetLibVersion 4 s after a freeze of lab2, with a
# migration's checks in flight).
# SOAK_HA=1 runs the provider as the chart's two replicas with
# --leader-elect against a real kube-apiserver (scripts/kube-apiserver.sh)
# and adds the provider-failover fault (docs/reliability.md, docs/ha.md);
# soak-lab-ha is that run. Neither is a stage of make test.
.PHONY: soak-lab soak-lab-ha
soak-lab-ha:
	@$(MAKE) --no-print-directory soak-lab SOAK_HA=1
soak-lab: build
	@mkdir -p out
	@rc=0; scripts/lab.sh up 4 >/dev/null || rc=$$?; \
	if [ $$rc = 0 ]; then \
		BIGFLEET_LIBVIRT_CLIENT=$$(scripts/libvirt-client.sh) SOAK_MINUTES=$(SOAK_MINUTES) SOAK_HA=$(SOAK_HA) $(GO) tool -modfile=tools/go.mod gotestsum --format standard-verbose --jsonfile $(GOTEST_JSON) -- \
			-count=1 -v -tags soaklab -timeout $$(( $(or $(SOAK_MINUTES),0) + 30 ))m -run '^TestSoakLab$$' ./test/soaklab/ || rc=$$?; \
	fi; \
	scripts/lab.sh down && scripts/lab.sh check-clean || rc=1; exit $$rc
