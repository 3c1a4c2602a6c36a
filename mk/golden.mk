# Issue 23: the golden image (docs/golden-image.md).
#
# make golden-image [GOLDEN=debian12|debian13]
#                  builds the Debian systemd golden image offline from Debian's
#                  mirror (scripts/golden/build.sh): one GPT qcow2 that boots
#                  under BIOS and UEFI (Secure Boot through Debian's signed
#                  shim), cached by recipe + mirror snapshot under
#                  /var/cache/bigfleet-libvirt/golden/<key>/; prints IMAGE=...
# make test-golden [GOLDEN=debian12|debian13]
#                  the CI stage: builds (or reuses) the Debian 12 image and
#                  runs it through bin/libvirt over gRPC on the real libvirtd,
#                  BIOS, from its own disk: Create → Configure (hook under
#                  systemd, blob sha256 checked in the guest) → Drain → Delete,
#                  and the same on the initramfs test guest for comparison.
#                  Times: out/test-golden-times.txt. Real libvirtd: on a shared
#                  machine run it under `flock /tmp/bf-real-libvirt.lock`.
# make golden-boot-times  boot-to-agent and boot-to-booted (the image's
#                  /opt/bigfleet/booted says 0) of the image under BIOS and
#                  UEFI (plain qemu, OVMF from Debian's ovmf), no libvirt.
#                  BIGFLEET_BOOT_NET=nodhcp: a NIC without DHCP;
#                  BIGFLEET_BOOT_SEED=user-data: a NoCloud seed as the
#                  provider's --base-user-data; BIGFLEET_BOOT_ANALYZE=1: print
#                  systemd-analyze time/blame/critical-chain from the guest.
.PHONY: golden-image test-golden golden-boot-times

GOLDEN ?= debian12

golden-image:
	@scripts/golden/build.sh $(GOLDEN)

test-golden: build env-up
	@mkdir -p out && rm -f out/test-golden-times.txt
	@image=$$(scripts/golden/build.sh $(GOLDEN) | sed -n 's/^IMAGE=//p' | tail -n1); \
	[ -f "$$image" ] || { echo "test-golden: no golden image" >&2; exit 1; }; \
	echo "test-golden: image $$image"; \
	source $(ENV_FILE) && export BIGFLEET_LIBVIRT_ENV=$(ENV_FILE) BIGFLEET_GOLDEN_IMAGE="$$image" && \
		$(GOTEST_PROGRESS) -count=1 -tags integration,golden -timeout 20m -run '^TestGoldenImageLifecycle$$' ./test/integration/; \
		rc=$$?; cat out/test-golden-times.txt 2>/dev/null; exit $$rc

golden-boot-times:
	@image=$$(scripts/golden/build.sh $(GOLDEN) | sed -n 's/^IMAGE=//p' | tail -n1); \
	scripts/golden/boot-times.sh "$$image"
