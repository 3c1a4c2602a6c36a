//go:build image

// Package image checks the container image `make image` builds (issue 14,
// docs/image.md) the way a cluster would use it:
//
//   - run_test.go: the image unpacked by umoci and run under runc with the
//     command, arguments, environment, mounts and security settings of the
//     chart's rendered Deployment (uid 65532, read-only root, no
//     capabilities, no new privileges, the RuntimeDefault seccomp
//     profile), against the real libvirtd through the libvirt socket as the
//     chart mounts it: health, reflection, List, Create -> Delete; the root
//     filesystem cannot be written and there is no shell to exec;
//   - files_test.go: the Dockerfile's runtime stage yields the same files
//     and configuration as make image, two builds give one digest, and the
//     chart's default image reference is what make image tags.
//
// Run it with `make test-image` (it builds the image first), under the
// shared lock of the real libvirtd. IMAGE_OUT names make image's output
// (default out/image); BIGFLEET_LIBVIRT_ENV the env file of
// scripts/libvirt-env.sh up.
package image
