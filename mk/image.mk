# The provider's container image (issue 14, docs/image.md).
#
# make image        builds it with no container engine and no base image:
#                   out/image/oci (OCI layout), out/image/libvirt-provider.tar
#                   (docker load / kind load image-archive / ctr import),
#                   out/image/sbom.spdx.json, out/image/packages.tsv; prints
#                   the digest, sizes and package count.
# make test-image   the CI stage: imgtool's unit tests, then test/image runs
#                   the image under runc with the rendered chart's security
#                   settings against the real libvirtd (health, reflection,
#                   List, Create -> Delete), checks two builds give one
#                   digest and that the Dockerfile yields the same files.
#                   Uses the real libvirtd: run it under the shared lock.
.PHONY: image test-image image-deps

IMAGE_OUT ?= out/image

image-deps:
	@scripts/deps.sh image

image: image-deps
	scripts/image/build.sh $(IMAGE_OUT)

test-image: image env-up
	@mkdir -p out
	cd scripts/image && $(GO) vet ./... && \
		$(GO) tool -modfile=../../tools/go.mod gotestsum --format pkgname-and-test-fails \
		--jsonfile ../../out/gotest-test-image-imgtool.json -- -count=1 ./...
	source $(ENV_FILE) && export BIGFLEET_LIBVIRT_ENV=$(ENV_FILE) IMAGE_OUT=$(abspath $(IMAGE_OUT)) && \
		$(GOTEST_PROGRESS) -count=1 -tags image -timeout 10m ./test/image/...
