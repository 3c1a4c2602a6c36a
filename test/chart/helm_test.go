package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
)

const (
	chartDir    = "../../helm/libvirt-provider"
	releaseName = "bf"
	namespace   = "bigfleet-system"
)

// valuesFile reads testdata/values/<name>.yaml the way `helm -f` does; the
// name "default" means no overrides.
func valuesFile(t *testing.T, name string) map[string]any {
	t.Helper()
	if name == "default" {
		return map[string]any{}
	}
	v, err := common.ReadValuesFile(filepath.Join("testdata", "values", name+".yaml"))
	if err != nil {
		t.Fatalf("values %s: %v", name, err)
	}
	return v.AsMap()
}

// valueSets lists "default" plus every testdata/values file.
func valueSets(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "values", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"default"}
	for _, f := range files {
		out = append(out, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	sort.Strings(out[1:])
	return out
}

// helmLint is `helm lint --strict`: any message of warning severity or
// above fails (that is what --strict lowers the tolerance to).
func helmLint(vals map[string]any) error {
	linter := lint.RunAll(chartDir, vals, namespace)
	var bad []string
	for _, m := range linter.Messages {
		if m.Severity >= support.WarningSev {
			bad = append(bad, m.Error())
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("helm lint --strict:\n  %s", strings.Join(bad, "\n  "))
	}
	return nil
}

// helmTemplate is `helm template bf helm/libvirt-provider -n bigfleet-system
// -f values`: the rendered files by template path, NOTES and partials
// dropped.
func helmTemplate(vals map[string]any) (map[string]string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	opts := common.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}
	rv, err := util.ToRenderValues(ch, vals, opts, common.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	for name := range out {
		base := filepath.Base(name)
		if strings.HasPrefix(base, "_") || !strings.HasSuffix(base, ".yaml") {
			delete(out, name)
		}
	}
	return out, nil
}

func TestChartLintStrict(t *testing.T) {
	t.Parallel()
	for _, name := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if err := helmLint(valuesFile(t, name)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestChartRefusesUnsafeValues: combinations the chart must refuse at
// template time, with a message that says what to change.
func TestChartRefusesUnsafeValues(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		vals    string
		wantErr string
	}{
		{"loadbalancer without mTLS", "service: {type: LoadBalancer}", "service.type=LoadBalancer exposes the provider outside the cluster"},
		{"nodeport with TLS only", "service: {type: NodePort}\ntls: {enabled: true}", "only allowed with tls.enabled=true and tls.mtls=true"},
		{"mtls without tls", "tls: {mtls: true}", "tls.mtls=true needs tls.enabled=true"},
		{"unknown libvirt mode", "libvirt: {mode: tcp}", `libvirt.mode "tcp": want ssh, tls or socket`},
		{"socket without group", "libvirt: {mode: socket}", "needs libvirt.socket.groupId"},
		{"socket with two hosts", "libvirt: {mode: socket, socket: {groupId: 111}, hosts: [{zone: a}, {zone: b}]}", "give at most one libvirt.hosts entry"},
		{"ssh host without address", "libvirt: {hosts: [{zone: a}]}", "libvirt.hosts[0].address is required"},
		{"host without zone", "libvirt: {hosts: [{address: h}]}", "libvirt.hosts[0].zone is required"},
		{"egress without CIDRs", "networkPolicy: {enabled: true, egress: {enabled: true}}", "needs networkPolicy.egress.libvirtCIDRs"},
		{"networkpolicy without grpc peers", "networkPolicy: {enabled: true, grpcFrom: []}", "networkPolicy.grpcFrom must name at least one peer"},
		{"bad log format", "logging: {format: xml}", `logging.format "xml": want json or text`},
		{"admin write without mTLS", "admin: {write: true, clients: [ops.example.net]}\ntls: {enabled: true}", "admin.write=true needs mTLS"},
		{"caller identity misspelt", "tls: {enabled: true, mtls: true, callerIdentity: shard}", `tls.callerIdentity "shard": want bigfleet or any`},
		{"admin clients without write", "admin: {clients: [ops.example.net]}", "admin.clients has no effect without admin.write=true"},
		{"admin CA without listener", "admin: {listener: {caSecret: ops-ca}}\ntls: {enabled: true}", "admin.listener.caSecret needs admin.listener.enabled=true"},
		{"admin CA without TLS", "admin: {listener: {enabled: true, caSecret: ops-ca}}", "admin.listener.caSecret needs tls.enabled=true"},
		{"admin listener without peers", "admin: {listener: {enabled: true}}\nnetworkPolicy: {enabled: true}", "networkPolicy.adminFrom must name at least one peer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := common.ReadValues([]byte(tc.vals))
			if err != nil {
				t.Fatal(err)
			}
			_, err = helmTemplate(v.AsMap())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("helm template: err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestMain(m *testing.M) {
	if _, err := os.Stat(filepath.Join(chartDir, "Chart.yaml")); err != nil {
		fmt.Fprintln(os.Stderr, "chart not found; run from test/chart:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestDump prints the rendered manifests of CHART_DUMP=<values set> (like
// `helm template`), for eyeballing: go test -run TestDump -v ./ with it set.
func TestDump(t *testing.T) {
	name := os.Getenv("CHART_DUMP")
	if name == "" {
		t.Skip("set CHART_DUMP=<values set> to print rendered manifests")
	}
	files, err := helmTemplate(valuesFile(t, name))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		fmt.Printf("---\n# Source: %s\n%s\n", f, strings.TrimSpace(files[f]))
	}
}
