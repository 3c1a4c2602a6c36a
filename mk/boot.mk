# Issue 32: warm capacity is warm (docs/benchmarks.md, "Boot").
#
# make bench-boot [GOLDEN=debian12] [BENCH_BOOT_N=5] [BENCH_BOOT_UEFI=1]
#                  on the real libvirtd, cold boots one at a time, for the
#                  test initramfs and (when scripts/golden/build.sh gives an
#                  image; BENCH_BOOT_GOLDEN=0 skips it) the Debian golden image
#                  under BIOS (and both under UEFI with BENCH_BOOT_UEFI=1;
#                  BENCH_BOOT_INITRAMFS=0: the image alone), the provider
#                  with --wait-booted and without it: Create → IDLE, Configure
#                  on IDLE → CONFIGURED, Create → CONFIGURED, p50/p90 over
#                  BENCH_BOOT_N machines. Table: out/bench-boot.md. Not a
#                  stage of make test. On a shared machine run it under
#                  `flock /tmp/bf-real-libvirt.lock`.
.PHONY: bench-boot

BENCH_BOOT_N ?= 5
BENCH_BOOT_GOLDEN ?= 1
BENCH_BOOT_UEFI ?= 0
BENCH_BOOT_INITRAMFS ?= 1

bench-boot: build env-up
	@mkdir -p out && rm -f out/bench-boot.md
	@image=""; if [ "$(BENCH_BOOT_GOLDEN)" = 1 ]; then \
		image=$$(scripts/golden/build.sh $(GOLDEN) | sed -n 's/^IMAGE=//p' | tail -n1); \
		[ -f "$$image" ] || { echo "bench-boot: no golden image; the test initramfs alone" >&2; image=""; }; \
	fi; \
	echo "bench-boot: image $${image:-none}, n=$(BENCH_BOOT_N), $$(nproc) CPUs, $$(uname -r)"; \
	source $(ENV_FILE) && export BIGFLEET_LIBVIRT_ENV=$(ENV_FILE) BIGFLEET_GOLDEN_IMAGE="$$image" \
		BIGFLEET_BENCH_BOOT_N=$(BENCH_BOOT_N) BIGFLEET_BENCH_BOOT_UEFI=$(BENCH_BOOT_UEFI) \
		BIGFLEET_BENCH_BOOT_INITRAMFS=$(BENCH_BOOT_INITRAMFS) && \
		$(GOTEST_PROGRESS) -count=1 -tags integration,golden,benchboot -timeout 180m -run '^TestBenchBoot$$' ./test/integration/; \
		rc=$$?; cat out/bench-boot.md 2>/dev/null; exit $$rc
