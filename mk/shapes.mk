# Issue 23: machine shapes on a real distribution image. Boots the golden
# image of `make golden-image` (Debian 12, systemd, qemu-guest-agent,
# cloud-init, BIOS and UEFI through shim) on the real libvirtd of
# scripts/libvirt-env.sh with three instance types, one after the other:
# disk_gib 8 (the guest's root file system is ~8 GiB after first boot),
# uefi-secure + tpm (the guest reports Secure Boot enabled and has tpm0),
# and two NICs (the guest has both). Prints each type's boot-to-agent time.
# It touches the real libvirtd: on a shared machine run it under
# `flock /tmp/bf-real-libvirt.lock make test-shapes`. IMAGE=path skips the build;
# GOLDEN=debian13 boots Debian 13's.

.PHONY: test-shapes

test-shapes: deps env-up
	@mkdir -p out && rm -f out/test-shapes-times.txt
	@image="$(IMAGE)"; \
	[ -n "$$image" ] || image=$$(scripts/golden/build.sh $(GOLDEN) | sed -n 's/^IMAGE=//p' | tail -n1); \
	[ -f "$$image" ] || { echo "test-shapes: golden image '$$image' not found" >&2; exit 1; }; \
	echo "test-shapes: image $$image"; \
	source $(ENV_FILE) && export BIGFLEET_LIBVIRT_ENV=$(ENV_FILE) BIGFLEET_SHAPES_IMAGE="$$image" && \
		$(GOTEST_PROGRESS) -count=1 -tags integration,shapes -timeout 45m -run '^TestGoldenShapes' ./test/integration/; \
		rc=$$?; cat out/test-shapes-times.txt 2>/dev/null; exit $$rc
