// Package chart checks the Helm chart (helm/libvirt-provider) and the
// container image definition (Dockerfile) without a cluster or an engine:
//
//   - helm lint --strict and helm template through Helm's own Go packages
//     (helm.sh/helm/v4), for the default values and every values file in
//     testdata/values (each credential mode, TLS, mTLS, NetworkPolicy,
//     ServiceMonitor, in-memory state);
//   - every rendered manifest strictly decoded into the real Kubernetes
//     types (unknown or duplicate fields fail), the ServiceMonitor into a
//     typed struct of its own;
//   - assertions on the hardened defaults (security contexts, service type,
//     probes, mounts) and on the flags the chart passes, against
//     `bin/libvirt --help`;
//   - the Dockerfile's stages, user and entrypoint against the chart, and the
//     binary's DT_NEEDED libraries against the runtime stage's packages.
//
// It is its own module so Helm's and Kubernetes' dependencies stay out of
// the provider's go.mod. Run it with test/chart/check.sh (make chart-check).
package chart
