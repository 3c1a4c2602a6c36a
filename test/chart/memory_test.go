package chart

import (
	"bytes"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// renderYAML is helm template with the values given inline, every document
// strictly decoded (as renderAndDecode does for a values file).
func renderYAML(t *testing.T, vals string) *rendered {
	t.Helper()
	v, err := common.ReadValues([]byte(vals))
	if err != nil {
		t.Fatal(err)
	}
	files, err := helmTemplate(v.AsMap())
	if err != nil {
		t.Fatalf("helm template (%s): %v", vals, err)
	}
	r := &rendered{}
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, file := range names {
		for i, doc := range docSep.Split(files[file], -1) {
			if len(bytes.TrimSpace(stripComments([]byte(doc)))) == 0 {
				continue
			}
			if err := r.add(file, []byte(doc)); err != nil {
				t.Fatalf("%s document %d: %v\n%s", file, i, err, doc)
			}
		}
	}
	return r
}

// memorySettings is what the provider's container gets: its memory limit
// and request, and every GOMEMLIMIT in its environment.
type memorySettings struct {
	limit, request resource.Quantity
	goMemLimits    []string
}

func memoryOf(t *testing.T, r *rendered) memorySettings {
	t.Helper()
	if r.deployment == nil || len(r.deployment.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("want a Deployment with one container")
	}
	c := r.deployment.Spec.Template.Spec.Containers[0]
	var m memorySettings
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		m.limit = q
	} else {
		t.Fatalf("no memory limit: %+v", c.Resources)
	}
	if q, ok := c.Resources.Requests[corev1.ResourceMemory]; ok {
		m.request = q
	}
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			m.goMemLimits = append(m.goMemLimits, e.Value)
		}
	}
	return m
}

// goMemLimitBytes parses the chart's GOMEMLIMIT, which it writes as
// <integer>MiB (one of the forms Go's runtime accepts).
var goMemLimitForm = regexp.MustCompile(`^([0-9]+)MiB$`)

func goMemLimitBytes(t *testing.T, v string) int64 {
	t.Helper()
	m := goMemLimitForm.FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("GOMEMLIMIT %q: want <n>MiB", v)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n << 20
}

// TestMemoryLimitFollowsFleet: the memory limit is computed from
// expectedMachines (base + per started 10k), the request follows it, and
// GOMEMLIMIT is 90% of it in MiB; an explicit limit wins, in any quantity
// form, and GOMEMLIMIT follows that.
func TestMemoryLimitFollowsFleet(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, vals            string
		limit, request, gomem string
	}{
		{"default values (10k)", "", "176Mi", "176Mi", "158MiB"},
		{"expectedMachines 100000", "expectedMachines: 100000", "608Mi", "608Mi", "547MiB"},
		{"expectedMachines 50000", "expectedMachines: 50000", "368Mi", "368Mi", "331MiB"},
		{"part of a 10k counts as a whole 10k", "expectedMachines: 10001", "224Mi", "224Mi", "201MiB"},
		{"expectedMachines 0 is the base", "expectedMachines: 0", "128Mi", "128Mi", "115MiB"},
		{"own figures", "expectedMachines: 30000\nmemory: {baseMiB: 100, perTenThousandMiB: 10, goMemLimitPercent: 50}", "130Mi", "130Mi", "65MiB"},
		{"explicit limit wins", "expectedMachines: 100000\nresources: {limits: {memory: 1Gi}}", "1Gi", "1Gi", "921MiB"},
		{"explicit fractional limit", "resources: {limits: {memory: 1.5Gi}}", "1.5Gi", "1.5Gi", "1382MiB"},
		{"explicit decimal limit", "resources: {limits: {memory: 600M}}", "600M", "600M", "514MiB"},
		{"explicit limit in bytes", "resources: {limits: {memory: 536870912}}", "512Mi", "512Mi", "460MiB"},
		{"explicit request kept", "resources: {requests: {memory: 96Mi}}", "176Mi", "96Mi", "158MiB"},
		{"explicit limit and request", "resources: {requests: {memory: 300Mi}, limits: {memory: 400Mi}}", "400Mi", "300Mi", "360MiB"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := memoryOf(t, renderYAML(t, tc.vals))
			if want := resource.MustParse(tc.limit); m.limit.Cmp(want) != 0 {
				t.Errorf("memory limit %s, want %s", m.limit.String(), tc.limit)
			}
			if want := resource.MustParse(tc.request); m.request.Cmp(want) != 0 {
				t.Errorf("memory request %s, want %s", m.request.String(), tc.request)
			}
			if len(m.goMemLimits) != 1 || m.goMemLimits[0] != tc.gomem {
				t.Errorf("GOMEMLIMIT %q, want exactly [%s]", m.goMemLimits, tc.gomem)
			}
		})
	}
}

// TestGoMemLimitOptOut: goMemLimitPercent 0 sets none; a GOMEMLIMIT in
// extraEnv is the only one (no duplicate env name).
func TestGoMemLimitOptOut(t *testing.T) {
	t.Parallel()
	m := memoryOf(t, renderYAML(t, "memory: {goMemLimitPercent: 0}"))
	if len(m.goMemLimits) != 0 {
		t.Errorf("goMemLimitPercent 0: GOMEMLIMIT %q, want none", m.goMemLimits)
	}
	m = memoryOf(t, renderYAML(t, "extraEnv: [{name: GOMEMLIMIT, value: 100MiB}, {name: GODEBUG, value: madvdontneed=1}]"))
	if len(m.goMemLimits) != 1 || m.goMemLimits[0] != "100MiB" {
		t.Errorf("extraEnv GOMEMLIMIT: got %q, want only [100MiB]", m.goMemLimits)
	}
}

// TestGoMemLimitBelowLimitInEveryValueSet: for the default values and
// every testdata values file, GOMEMLIMIT is set once, in Go's syntax, to
// 90% of the memory limit (rounded down to a MiB), and the request is not
// above the limit.
func TestGoMemLimitBelowLimitInEveryValueSet(t *testing.T) {
	t.Parallel()
	for _, name := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := memoryOf(t, renderAndDecode(t, name))
			if len(m.goMemLimits) != 1 {
				t.Fatalf("GOMEMLIMIT %q: want exactly one", m.goMemLimits)
			}
			got := goMemLimitBytes(t, m.goMemLimits[0])
			want := m.limit.Value() * 90 / 100 >> 20 << 20
			if got != want {
				t.Errorf("GOMEMLIMIT %s (%d bytes), want 90%% of %s = %d bytes", m.goMemLimits[0], got, m.limit.String(), want)
			}
			if m.request.Cmp(m.limit) > 0 {
				t.Errorf("memory request %s above the limit %s", m.request.String(), m.limit.String())
			}
		})
	}
}

// TestMemoryValuesRefused: values the chart cannot turn into a limit or
// GOMEMLIMIT fail at template time, naming the value.
func TestMemoryValuesRefused(t *testing.T) {
	t.Parallel()
	cases := []struct{ vals, wantErr string }{
		{"expectedMachines: -1", "expectedMachines -1: want a whole number"},
		{"expectedMachines: 1.5", "expectedMachines 1.5: want a whole number"},
		{"expectedMachines: lots", "expectedMachines lots: want a whole number"},
		{"expectedMachines: null", "want a whole number"},
		{"resources: {limits: {memory: 500m}}", `resources.limits.memory "500m": want a byte quantity`},
		{"resources: {limits: {memory: lots}}", `resources.limits.memory "lots": want a byte quantity`},
		{"memory: {goMemLimitPercent: 150}", "memory.goMemLimitPercent 150: want 0 (no GOMEMLIMIT) to 100"},
	}
	for _, tc := range cases {
		t.Run(tc.vals, func(t *testing.T) {
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
