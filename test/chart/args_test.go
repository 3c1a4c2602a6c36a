package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Mount points the chart promises (see _helpers.tpl).
const (
	configDir  = "/etc/bigfleet/config"
	tlsDir     = "/etc/bigfleet/tls"
	sshDir     = "/etc/bigfleet/libvirt-ssh"
	pkiDir     = "/etc/bigfleet/libvirt-pki"
	adminCADir = "/etc/bigfleet/admin-ca"
	stateFile  = "/var/lib/libvirt-provider/state.db"
)

// binaryPath is the provider binary whose --help defines the valid flags:
// $LIBVIRT_BIN (check.sh builds one) or the repository's bin/libvirt.
func binaryPath() string {
	if p := os.Getenv("LIBVIRT_BIN"); p != "" {
		return p
	}
	return filepath.Join("..", "..", "bin", "libvirt")
}

var (
	helpOnce  sync.Once
	helpFlags map[string]bool
	helpErr   error
	helpText  string
)

// flagLine matches Go's flag usage lines: "  -name type" or "  --name".
var flagLine = regexp.MustCompile(`(?m)^\s+--?([a-z][a-z0-9-]*)\b`)

// binaryFlags runs `bin/libvirt --help` once and returns the flag names.
// Without a binary the test is skipped, unless CHART_REQUIRE_BINARY=1 (set
// by check.sh after building it), which makes a missing binary a failure.
func binaryFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin := binaryPath()
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CHART_REQUIRE_BINARY") == "1" {
			t.Fatalf("provider binary %s: %v", bin, err)
		}
		t.Skipf("no provider binary at %s (build it, or run test/chart/check.sh): flags not checked", bin)
	}
	helpOnce.Do(func() {
		var out bytes.Buffer
		cmd := exec.Command(bin, "--help")
		cmd.Stdout, cmd.Stderr = &out, &out
		_ = cmd.Run() // flag.ErrHelp exits 0 or 2 depending on the FlagSet's mode
		helpText = out.String()
		helpFlags = map[string]bool{}
		for _, m := range flagLine.FindAllStringSubmatch(helpText, -1) {
			helpFlags[m[1]] = true
		}
		if len(helpFlags) < 10 {
			helpErr = &helpError{helpText}
		}
	})
	if helpErr != nil {
		t.Fatal(helpErr)
	}
	return helpFlags
}

type helpError struct{ out string }

func (e *helpError) Error() string {
	return "could not read the flag list from --help; output was:\n" + e.out
}

// parseArgs splits --name=value arguments. Every chart argument uses the
// = form so a value can never be taken for the next flag.
func parseArgs(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range args {
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("argument %q is not --name=value", a)
			continue
		}
		if _, dup := out[name]; dup && name != "reflection" { // extraArgs may override
			t.Errorf("flag --%s passed twice", name)
		}
		out[name] = val
	}
	return out
}

func TestChartFlagsExistInBinary(t *testing.T) {
	t.Parallel()
	flags := binaryFlags(t)
	for _, want := range []string{"addr", "metrics-addr", "connect", "state", "tls-cert", "tls-key", "tls-ca"} {
		if !flags[want] {
			t.Fatalf("--help lists no --%s; output:\n%s", want, helpText)
		}
	}
	seen := map[string]bool{}
	for _, name := range valueSets(t) {
		r := renderAndDecode(t, name)
		for flag := range parseArgs(t, r.deployment.Spec.Template.Spec.Containers[0].Args) {
			seen[flag] = true
			if !flags[flag] {
				t.Errorf("values %s: the chart passes --%s, which bin/libvirt --help does not list", name, flag)
			}
		}
	}
	var used []string
	for f := range seen {
		used = append(used, f)
	}
	sort.Strings(used)
	t.Logf("flags the chart passes across all value sets: %s", strings.Join(used, " "))
}

// checkArgs ties the flags to the mounts and to the credential mode.
func checkArgs(t *testing.T, r *rendered, c corev1.Container, vals map[string]any) {
	t.Helper()
	args := parseArgs(t, c.Args)
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	vols := map[string]corev1.Volume{}
	pod := r.deployment.Spec.Template.Spec
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	secretItems := func(dir string) []string {
		m, ok := mounts[dir]
		if !ok || vols[m.Name].Secret == nil {
			t.Errorf("%s is not mounted from a Secret", dir)
			return nil
		}
		var out []string
		for _, it := range vols[m.Name].Secret.Items {
			out = append(out, it.Path)
		}
		sort.Strings(out)
		return out
	}

	for _, f := range []string{"addr", "metrics-addr", "provider", "storage-pool", "network", "log-level", "log-format"} {
		if _, ok := args[f]; !ok {
			t.Errorf("--%s not passed", f)
		}
	}
	for _, p := range c.Ports {
		if p.Name == "grpc" && args["addr"] != ":"+itoa(p.ContainerPort) {
			t.Errorf("--addr=%s but the grpc port is %d", args["addr"], p.ContainerPort)
		}
		if p.Name == "metrics" && args["metrics-addr"] != ":"+itoa(p.ContainerPort) {
			t.Errorf("--metrics-addr=%s but the metrics port is %d", args["metrics-addr"], p.ContainerPort)
		}
	}

	// Durable state unless in-memory was chosen explicitly.
	inMemory := lookup(vals, "state", "inMemory") == true
	if st, ok := args["state"]; inMemory == ok || (ok && st != stateFile) {
		t.Errorf("--state=%q (passed %v) with state.inMemory=%v; want %s unless in-memory", st, ok, inMemory, stateFile)
	}

	// gRPC TLS from the Secret directory.
	tlsOn, mtls := lookup(vals, "tls", "enabled") == true, lookup(vals, "tls", "mtls") == true
	_, hasCert := args["tls-cert"]
	_, hasCA := args["tls-ca"]
	if hasCert != tlsOn || hasCA != mtls {
		t.Errorf("tls flags cert=%v ca=%v with tls.enabled=%v mtls=%v", hasCert, hasCA, tlsOn, mtls)
	}
	wantMode := lookup(vals, "tls", "callerIdentity")
	if wantMode == nil {
		wantMode = "bigfleet" // the chart's default
	}
	if mode, ok := args["caller-identity"]; ok != (tlsOn && mtls) || (ok && mode != wantMode) {
		t.Errorf("--caller-identity=%q (passed %v) with tls.enabled=%v mtls=%v callerIdentity=%v", mode, ok, tlsOn, mtls, wantMode)
	}
	if tlsOn {
		if args["tls-cert"] != tlsDir+"/tls.crt" || args["tls-key"] != tlsDir+"/tls.key" {
			t.Errorf("tls paths %q %q", args["tls-cert"], args["tls-key"])
		}
		want := []string{"tls.crt", "tls.key"}
		if mtls {
			want = []string{"ca.crt", "tls.crt", "tls.key"}
		}
		if got := secretItems(tlsDir); !equal(got, want) {
			t.Errorf("TLS secret items %v, want %v", got, want)
		}
	}

	checkCordonFile(t, args, mounts, vols)
	checkAdmin(t, args, c, vals, secretItems)
	checkConnect(t, args, vals, pod, secretItems)
	checkConfigFiles(t, r, args)
}

// checkAdmin: --admin-addr matches the admin port, --admin-tls-ca is the
// mounted Secret's ca.crt, --admin-clients joins admin.clients.
func checkAdmin(t *testing.T, args map[string]string, c corev1.Container, vals map[string]any, secretItems func(string) []string) {
	t.Helper()
	on := lookup(vals, "admin", "listener", "enabled") == true
	addr, hasAddr := args["admin-addr"]
	if hasAddr != on {
		t.Errorf("--admin-addr passed=%v with admin.listener.enabled=%v", hasAddr, on)
	}
	for _, p := range c.Ports {
		if p.Name == "admin" && (!on || addr != ":"+itoa(p.ContainerPort)) {
			t.Errorf("--admin-addr=%s but the admin port is %d", addr, p.ContainerPort)
		}
	}
	caSecret, _ := lookup(vals, "admin", "listener", "caSecret").(string)
	if ca, ok := args["admin-tls-ca"]; ok != (caSecret != "") || (ok && ca != adminCADir+"/ca.crt") {
		t.Errorf("--admin-tls-ca=%q (passed %v) with admin.listener.caSecret=%q", ca, ok, caSecret)
	} else if ok && !equal(secretItems(adminCADir), []string{"ca.crt"}) {
		t.Errorf("admin CA secret items %v, want [ca.crt]", secretItems(adminCADir))
	}
	var want []string
	if cl, ok := lookup(vals, "admin", "clients").([]any); ok {
		for _, v := range cl {
			want = append(want, fmt.Sprint(v))
		}
	}
	if got := args["admin-clients"]; got != strings.Join(want, ",") {
		t.Errorf("--admin-clients=%q, want %q", got, strings.Join(want, ","))
	}
}

func checkConnect(t *testing.T, args map[string]string, vals map[string]any, pod corev1.PodSpec, secretItems func(string) []string) {
	t.Helper()
	mode, _ := lookup(vals, "libvirt", "mode").(string)
	if mode == "" {
		mode = "ssh"
	}
	connect, hasConnect := args["connect"]
	hosts, _ := lookup(vals, "libvirt", "hosts").([]any)
	override, _ := lookup(vals, "libvirt", "connect").(string)
	if !hasConnect {
		if len(hosts) > 0 || override != "" || mode == "socket" {
			t.Fatal("--connect missing although hosts are configured")
		}
		return
	}
	for _, weak := range []string{"+tcp://", "known_hosts_verify=auto", "known_hosts_verify=ignore", "no_verify="} {
		if strings.Contains(connect, weak) {
			t.Errorf("--connect uses a refused transport option %q: %s", weak, connect)
		}
	}
	if override != "" {
		if connect != override {
			t.Errorf("--connect=%q, want the override %q", connect, override)
		}
		return
	}
	uris := strings.Split(connect, ",")
	if len(hosts) > 0 && len(uris) != len(hosts) {
		t.Errorf("--connect has %d entries for %d hosts", len(uris), len(hosts))
	}
	for _, u := range uris {
		switch mode {
		case "ssh":
			if !strings.Contains(u, "=qemu+libssh://") || !strings.Contains(u, "keyfile="+sshDir+"/id") ||
				!strings.Contains(u, "known_hosts="+sshDir+"/known_hosts") || !strings.Contains(u, "known_hosts_verify=normal") {
				t.Errorf("ssh mode URI %q must be qemu+libssh with keyfile and a pinned known_hosts from %s", u, sshDir)
			}
		case "tls":
			if !strings.Contains(u, "=qemu+tls://") || !strings.Contains(u, "pkipath="+pkiDir) {
				t.Errorf("tls mode URI %q must be qemu+tls with pkipath=%s", u, pkiDir)
			}
		case "socket":
			if !strings.HasSuffix(u, "qemu:///system") {
				t.Errorf("socket mode URI %q, want qemu:///system", u)
			}
		}
	}
	switch mode {
	case "ssh":
		if got := secretItems(sshDir); !equal(got, []string{"id", "known_hosts"}) {
			t.Errorf("ssh secret items %v", got)
		}
	case "tls":
		if got := secretItems(pkiDir); !equal(got, []string{"cacert.pem", "clientcert.pem", "clientkey.pem"}) {
			t.Errorf("pki secret items %v (libvirt's pkipath layout)", got)
		}
	case "socket":
		gid, _ := lookup(vals, "libvirt", "socket", "groupId").(float64)
		if pod.SecurityContext == nil || !containsInt(pod.SecurityContext.SupplementalGroups, int64(gid)) {
			t.Errorf("socket mode: supplementalGroups must contain the socket's group %v", gid)
		}
	}
}

// checkConfigFiles: file flags point into the ConfigMap, whose JSON is in
// the binary's schema (unknown fields would be refused at startup).
func checkConfigFiles(t *testing.T, r *rendered, args map[string]string) {
	t.Helper()
	type offering struct {
		InstanceType string            `json:"instance_type"`
		Zone         string            `json:"zone"`
		CapacityType string            `json:"capacity_type"`
		Count        int               `json:"count"`
		Resources    map[string]string `json:"resources,omitempty"`
		Labels       map[string]string `json:"labels,omitempty"`
	}
	type instanceType struct {
		Name      string `json:"name"`
		VCPU      int    `json:"vcpu"`
		MemoryMiB int    `json:"memory_mib"`
		// Machine shapes (docs/configuration.md), the binary's names.
		DiskGiB  int    `json:"disk_gib,omitempty"`
		Firmware string `json:"firmware,omitempty"`
		TPM      bool   `json:"tpm,omitempty"`
		CPU      *struct {
			Model   string `json:"model,omitempty"`
			Sockets int    `json:"sockets,omitempty"`
			Cores   int    `json:"cores,omitempty"`
			Threads int    `json:"threads,omitempty"`
		} `json:"cpu,omitempty"`
		HugePages string `json:"hugepages,omitempty"`
		Network   []struct {
			Network string `json:"network,omitempty"`
			Bridge  string `json:"bridge,omitempty"`
			Model   string `json:"model,omitempty"`
		} `json:"network,omitempty"`
	}
	files := map[string]any{
		"offerings":      &[]offering{},
		"instance-types": &[]instanceType{},
		"base-user-data": nil,
	}
	for flag, into := range files {
		path, ok := args[flag]
		if !ok {
			continue
		}
		dir, key := filepath.Split(path)
		if filepath.Clean(dir) != configDir {
			t.Errorf("--%s=%s is not in the ConfigMap mount %s", flag, path, configDir)
			continue
		}
		data, ok := r.configMap.Data[key]
		if !ok {
			t.Errorf("--%s=%s but the ConfigMap has no key %q", flag, path, key)
			continue
		}
		if into == nil {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(into); err != nil {
			t.Errorf("ConfigMap %s: %v\n%s", key, err, data)
		}
	}
	for key := range r.configMap.Data {
		used := false
		for flag := range files {
			if strings.HasSuffix(args[flag], "/"+key) {
				used = true
			}
		}
		if !used {
			t.Errorf("ConfigMap key %q is not passed to any flag", key)
		}
	}
}

func itoa(i int32) string { return jsonNum(i) }

func jsonNum(i int32) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func containsInt(list []int64, v int64) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
