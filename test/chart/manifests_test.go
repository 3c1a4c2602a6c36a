package chart

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// ServiceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor the
// chart renders. Its CRD types are not a dependency here; decoding strictly
// into this struct catches a misspelt or misplaced field all the same.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path,omitempty"`
			Scheme        string `json:"scheme,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered is one release's objects, decoded.
type rendered struct {
	deployment      *appsv1.Deployment
	service         *corev1.Service
	configMap       *corev1.ConfigMap
	journal         *corev1.ConfigMap // the leader's shared journal (journal.yaml)
	pvc             *corev1.PersistentVolumeClaim
	serviceAccount  *corev1.ServiceAccount
	networkPolicy   *networkingv1.NetworkPolicy
	serviceMonitor  *ServiceMonitor
	role            *rbacv1.Role
	roleBinding     *rbacv1.RoleBinding
	pdb             *policyv1.PodDisruptionBudget
	kinds           []string
	configMapSource string
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decodeStrict decodes one YAML document into out, failing on unknown or
// duplicate fields: the check kubeconform would do with real schemas.
func decodeStrict(doc []byte, out any) error {
	return yaml.UnmarshalStrict(doc, out)
}

// renderAndDecode renders a values set and strictly decodes every document
// into its Kubernetes type. Unknown kinds fail.
func renderAndDecode(t *testing.T, name string) *rendered {
	t.Helper()
	files, err := helmTemplate(valuesFile(t, name))
	if err != nil {
		t.Fatalf("helm template (%s): %v", name, err)
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

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

func (r *rendered) add(file string, doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	key := tm.APIVersion + "/" + tm.Kind
	r.kinds = append(r.kinds, tm.Kind)
	var err error
	switch key {
	case "apps/v1/Deployment":
		r.deployment = &appsv1.Deployment{}
		err = decodeStrict(doc, r.deployment)
	case "v1/Service":
		r.service = &corev1.Service{}
		err = decodeStrict(doc, r.service)
	case "v1/ConfigMap":
		cm := &corev1.ConfigMap{}
		if err = decodeStrict(doc, cm); err == nil && strings.HasSuffix(cm.Name, "-intents") {
			r.journal = cm
			break
		}
		r.configMap = cm
		r.configMapSource = string(doc)
	case "v1/PersistentVolumeClaim":
		r.pvc = &corev1.PersistentVolumeClaim{}
		err = decodeStrict(doc, r.pvc)
	case "v1/ServiceAccount":
		r.serviceAccount = &corev1.ServiceAccount{}
		err = decodeStrict(doc, r.serviceAccount)
	case "networking.k8s.io/v1/NetworkPolicy":
		r.networkPolicy = &networkingv1.NetworkPolicy{}
		err = decodeStrict(doc, r.networkPolicy)
	case "monitoring.coreos.com/v1/ServiceMonitor":
		r.serviceMonitor = &ServiceMonitor{}
		err = decodeStrict(doc, r.serviceMonitor)
	case "rbac.authorization.k8s.io/v1/Role":
		r.role = &rbacv1.Role{}
		err = decodeStrict(doc, r.role)
	case "rbac.authorization.k8s.io/v1/RoleBinding":
		r.roleBinding = &rbacv1.RoleBinding{}
		err = decodeStrict(doc, r.roleBinding)
	case "policy/v1/PodDisruptionBudget":
		r.pdb = &policyv1.PodDisruptionBudget{}
		err = decodeStrict(doc, r.pdb)
	default:
		return fmt.Errorf("%s renders %s, which this check does not know", file, key)
	}
	return err
}

func TestStrictDecodeRejectsUnknownFields(t *testing.T) {
	t.Parallel()
	// The decoder itself must be strict, or every other check is hollow.
	doc := []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 1\n")
	if err := decodeStrict(doc, &appsv1.Deployment{}); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("unknown field accepted: %v", err)
	}
	dup := []byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {type: ClusterIP, type: LoadBalancer}\n")
	if err := decodeStrict(dup, &corev1.Service{}); err == nil {
		t.Fatal("duplicate field accepted")
	}
	sm := []byte("apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec: {endpoints: [{port: m, intervall: 1s}]}\n")
	if err := decodeStrict(sm, &ServiceMonitor{}); err == nil {
		t.Fatal("unknown ServiceMonitor field accepted")
	}
}

func TestRenderedManifests(t *testing.T) {
	t.Parallel()
	for _, name := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := renderAndDecode(t, name)
			vals := valuesFile(t, name)
			checkDeployment(t, r, vals)
			checkService(t, r, vals)
			checkOptionalObjects(t, r, vals)
			checkLeaderObjects(t, r, vals)
		})
	}
}

func checkDeployment(t *testing.T, r *rendered, vals map[string]any) {
	t.Helper()
	d := r.deployment
	if d == nil {
		t.Fatal("no Deployment rendered")
	}
	if d.Namespace != namespace {
		t.Errorf("Deployment namespace %q", d.Namespace)
	}
	pod := d.Spec.Template.Spec
	checkReplicas(t, r, vals)
	ps := pod.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ptrInt(ps.RunAsUser) != imageUID ||
		ptrInt(ps.RunAsGroup) != imageUID || ptrInt(ps.FSGroup) != imageUID {
		t.Errorf("pod securityContext %+v: want runAsNonRoot, uid/gid/fsGroup %d", ps, imageUID)
	}
	if ps == nil || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod seccompProfile must be RuntimeDefault")
	}
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		t.Fatalf("want exactly one container, got %d (+%d init)", len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	checkContainerSecurity(t, c)
	if len(c.Command) != 1 || c.Command[0] != chartBinary {
		t.Errorf("command %q, want [%s] (the image's ENTRYPOINT)", c.Command, chartBinary)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources must set cpu/memory requests and a memory limit: %+v", c.Resources)
	}
	checkProbes(t, c)
	checkMounts(t, pod, c, vals)
	checkArgs(t, r, c, vals)
}

const chartBinary = "/usr/local/bin/libvirt"

func ptrInt(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

func checkContainerSecurity(t *testing.T, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("container securityContext missing")
	}
	checks := []struct {
		ok   bool
		what string
	}{
		{sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, "runAsNonRoot: true"},
		{ptrInt(sc.RunAsUser) == imageUID && ptrInt(sc.RunAsGroup) == imageUID, fmt.Sprintf("runAsUser/runAsGroup %d", imageUID)},
		{sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "allowPrivilegeEscalation: false"},
		{sc.Privileged == nil || !*sc.Privileged, "not privileged"},
		{sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "readOnlyRootFilesystem: true"},
		{sc.Capabilities != nil && len(sc.Capabilities.Add) == 0 && len(sc.Capabilities.Drop) == 1 && sc.Capabilities.Drop[0] == "ALL", "capabilities drop [ALL], add none"},
		{sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault, "seccompProfile RuntimeDefault"},
	}
	for _, ch := range checks {
		if !ch.ok {
			t.Errorf("container securityContext: want %s; got %+v", ch.what, sc)
		}
	}
}

func checkProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	want := map[string]struct {
		p    *corev1.Probe
		path string
	}{
		"liveness":  {c.LivenessProbe, "/healthz"},
		"readiness": {c.ReadinessProbe, "/readyz"},
		"startup":   {c.StartupProbe, "/healthz"},
	}
	for name, w := range want {
		if w.p == nil || w.p.HTTPGet == nil {
			t.Errorf("%s probe must be an httpGet", name)
			continue
		}
		if w.p.HTTPGet.Path != w.path || w.p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe %s on port %s, want %s on metrics", name, w.p.HTTPGet.Path, w.p.HTTPGet.Port.String(), w.path)
		}
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["grpc"] == 0 || ports["metrics"] == 0 || ports["grpc"] == ports["metrics"] {
		t.Errorf("container ports %v: want distinct grpc and metrics", ports)
	}
}

// checkMounts: only /tmp, the state volume and the libvirt socket may be
// writable; every Secret is mounted read-only as a directory (no subPath,
// so Secret updates reach the process).
func checkMounts(t *testing.T, pod corev1.PodSpec, c corev1.Container, vals map[string]any) {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	mounted := map[string]string{}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			t.Errorf("mount %s has no volume", m.Name)
			continue
		}
		mounted[m.MountPath] = m.Name
		if m.SubPath != "" {
			t.Errorf("mount %s uses subPath: Secret/ConfigMap updates would never arrive", m.Name)
		}
		writable := m.MountPath == "/tmp" || v.PersistentVolumeClaim != nil ||
			(m.MountPath == "/var/lib/libvirt-provider" && v.EmptyDir != nil) || (v.HostPath != nil && v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathSocket)
		if !writable && !m.ReadOnly {
			t.Errorf("mount %s at %s must be readOnly", m.Name, m.MountPath)
		}
		if v.Secret != nil && (v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o007 != 0) {
			t.Errorf("secret volume %s must not be world-readable (defaultMode %v)", m.Name, v.Secret.DefaultMode)
		}
		if v.HostPath != nil && (v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathSocket) {
			t.Errorf("hostPath %s: only the libvirt socket may come from the host", v.HostPath.Path)
		}
	}
	if v, ok := vols[mounted["/tmp"]]; !ok || v.EmptyDir == nil {
		t.Error("/tmp must be a writable emptyDir (readOnlyRootFilesystem)")
	}
	inMemory := lookup(vals, "state", "inMemory") == true
	if _, ok := mounted["/var/lib/libvirt-provider"]; ok == inMemory {
		t.Errorf("state volume mounted=%v with state.inMemory=%v", ok, inMemory)
	}
}

func checkService(t *testing.T, r *rendered, vals map[string]any) {
	t.Helper()
	s := r.service
	if s == nil {
		t.Fatal("no Service rendered")
	}
	want := corev1.ServiceTypeClusterIP
	if v, ok := lookup(vals, "service", "type").(string); ok {
		want = corev1.ServiceType(v)
	}
	if s.Spec.Type != want {
		t.Errorf("service type %q, want %q", s.Spec.Type, want)
	}
	if s.Spec.Type != corev1.ServiceTypeClusterIP && !(lookup(vals, "tls", "mtls") == true) {
		t.Errorf("a %s Service without mTLS must never render", s.Spec.Type)
	}
	ports := map[string]corev1.ServicePort{}
	for _, p := range s.Spec.Ports {
		ports[p.Name] = p
	}
	grpcTarget, metricsTarget, adminTarget := ports["grpc"].TargetPort, ports["metrics"].TargetPort, ports["admin"].TargetPort
	adminOn := lookup(vals, "admin", "listener", "enabled") == true
	wantPorts := map[bool]int{false: 2, true: 3}[adminOn]
	if grpcTarget.String() != "grpc" || metricsTarget.String() != "metrics" || len(ports) != wantPorts ||
		(adminOn && adminTarget.String() != "admin") {
		t.Errorf("service ports %+v: want grpc and metrics (and admin with admin.listener.enabled) only", s.Spec.Ports)
	}
	sel := r.deployment.Spec.Selector.MatchLabels
	for k, v := range s.Spec.Selector {
		if sel[k] != v {
			t.Errorf("service selector %s=%s does not select the Deployment's pods", k, v)
		}
	}
	ann := r.deployment.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" ||
		ann["prometheus.io/port"] != fmt.Sprint(ports["metrics"].Port) {
		t.Errorf("prometheus.io annotations %v do not point at the metrics port", ann)
	}
}

func checkOptionalObjects(t *testing.T, r *rendered, vals map[string]any) {
	t.Helper()
	inMemory := lookup(vals, "state", "inMemory") == true
	existing, _ := lookup(vals, "state", "existingClaim").(string)
	if (r.pvc != nil) != (!inMemory && existing == "" && !leaderElection(vals)) {
		t.Errorf("PVC rendered=%v with inMemory=%v existingClaim=%q", r.pvc != nil, inMemory, existing)
	}
	if r.pvc != nil {
		if r.pvc.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Error("the state PVC must survive helm uninstall (resource-policy: keep)")
		}
		if len(r.pvc.Spec.AccessModes) != 1 || r.pvc.Spec.AccessModes[0] != corev1.ReadWriteOnce {
			t.Errorf("state PVC access modes %v, want [ReadWriteOnce]", r.pvc.Spec.AccessModes)
		}
	}
	if r.serviceAccount == nil || r.serviceAccount.AutomountServiceAccountToken == nil || *r.serviceAccount.AutomountServiceAccountToken {
		t.Error("ServiceAccount must exist with automountServiceAccountToken: false")
	}
	if r.configMap == nil {
		t.Fatal("no ConfigMap rendered")
	}

	npOn := lookup(vals, "networkPolicy", "enabled") == true
	if (r.networkPolicy != nil) != npOn {
		t.Errorf("NetworkPolicy rendered=%v, enabled=%v", r.networkPolicy != nil, npOn)
	}
	if np := r.networkPolicy; np != nil {
		want := []string{"grpc", "metrics"}
		if lookup(vals, "admin", "listener", "enabled") == true {
			want = []string{"grpc", "admin", "metrics"}
		}
		if len(np.Spec.Ingress) != len(want) {
			t.Fatalf("want one ingress rule per port, got %d", len(np.Spec.Ingress))
		}
		for i, port := range want {
			rule := np.Spec.Ingress[i]
			if len(rule.Ports) != 1 || rule.Ports[0].Port.String() != port || len(rule.From) == 0 {
				t.Errorf("ingress rule %d: want port %s from named peers only, got %+v", i, port, rule)
			}
		}
		for k, v := range np.Spec.PodSelector.MatchLabels {
			if r.deployment.Spec.Template.Labels[k] != v {
				t.Errorf("NetworkPolicy podSelector %s=%s misses the pods", k, v)
			}
		}
		if lookup(vals, "networkPolicy", "egress", "enabled") == true {
			if len(np.Spec.Egress) == 0 || !hasString(policyTypes(np), "Egress") {
				t.Error("egress enabled but no Egress policy rendered")
			}
			for _, e := range np.Spec.Egress[1:] {
				for _, to := range e.To {
					if to.IPBlock == nil || to.IPBlock.CIDR == "0.0.0.0/0" {
						t.Errorf("libvirt egress must be limited to the listed CIDRs: %+v", to)
					}
				}
			}
		}
	}

	smOn := lookup(vals, "serviceMonitor", "enabled") == true
	if (r.serviceMonitor != nil) != smOn {
		t.Errorf("ServiceMonitor rendered=%v, enabled=%v", r.serviceMonitor != nil, smOn)
	}
	if sm := r.serviceMonitor; sm != nil {
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoints %+v", sm.Spec.Endpoints)
		}
		for k, v := range sm.Spec.Selector.MatchLabels {
			if r.service.Labels[k] != v {
				t.Errorf("ServiceMonitor selector %s=%s misses the Service", k, v)
			}
		}
	}
}

func policyTypes(np *networkingv1.NetworkPolicy) []string {
	var out []string
	for _, p := range np.Spec.PolicyTypes {
		out = append(out, string(p))
	}
	return out
}

func hasString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// lookup walks nested values maps; nil when a key is missing.
func lookup(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}
