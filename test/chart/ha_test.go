package chart

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// leaderElection is leaderElection.enabled (the chart's default: on).
func leaderElection(vals map[string]any) bool {
	return lookup(vals, "leaderElection", "enabled") != false
}

func replicas(vals map[string]any) int32 {
	switch n := lookup(vals, "replicas").(type) {
	case float64:
		return int32(n)
	case int64:
		return int32(n)
	case int:
		return int32(n)
	}
	return 2 // the chart's default
}

// checkReplicas: two replicas with leader election by default; without
// it exactly one, Recreate, and no API token.
func checkReplicas(t *testing.T, r *rendered, vals map[string]any) {
	t.Helper()
	d := r.deployment
	pod := d.Spec.Template.Spec
	ha := leaderElection(vals)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != replicas(vals) {
		t.Errorf("replicas %v, want %d", d.Spec.Replicas, replicas(vals))
	}
	if !ha && *d.Spec.Replicas != 1 {
		t.Error("more than one replica without leader election")
	}
	wantStrategy := appsv1.RecreateDeploymentStrategyType
	if ha {
		wantStrategy = appsv1.RollingUpdateDeploymentStrategyType
	}
	if d.Spec.Strategy.Type != wantStrategy {
		t.Errorf("strategy %q, want %q", d.Spec.Strategy.Type, wantStrategy)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken != ha {
		t.Errorf("automountServiceAccountToken %v, want %v (only leader election talks to the API)", pod.AutomountServiceAccountToken, ha)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e
	}
	podName := env["POD_NAME"].ValueFrom
	if ha != (podName != nil && podName.FieldRef != nil && podName.FieldRef.FieldPath == "metadata.name") {
		t.Errorf("POD_NAME from the downward API: %v, want %v", podName, ha)
	}
	args := parseArgs(t, pod.Containers[0].Args)
	if _, ok := args["leader-elect"]; ok != ha {
		t.Errorf("--leader-elect passed %v with leaderElection.enabled=%v", ok, ha)
	}
	anti := pod.Affinity != nil && pod.Affinity.PodAntiAffinity != nil
	if anti != (*d.Spec.Replicas > 1) {
		t.Errorf("pod anti-affinity %v with %d replicas", anti, *d.Spec.Replicas)
	}
}

// checkLeaderObjects: the Role grants get/update on the release's Lease
// and on its shared journal ConfigMap ("<lease>-intents", rendered empty)
// only, and create on leases; it is bound to the pod's ServiceAccount;
// a PodDisruptionBudget keeps a replica through drains.
func checkLeaderObjects(t *testing.T, r *rendered, vals map[string]any) {
	t.Helper()
	ha := leaderElection(vals)
	if (r.role != nil) != ha || (r.roleBinding != nil) != ha || (r.journal != nil) != ha {
		t.Fatalf("Role/RoleBinding/journal rendered %v/%v/%v with leader election %v", r.role != nil, r.roleBinding != nil, r.journal != nil, ha)
	}
	if (r.pdb != nil) != (replicas(vals) > 1) {
		t.Errorf("PodDisruptionBudget rendered %v with %d replicas", r.pdb != nil, replicas(vals))
	}
	if r.pdb != nil && (r.pdb.Spec.MinAvailable == nil || r.pdb.Spec.MinAvailable.IntValue() != 1) {
		t.Errorf("PDB minAvailable %v, want 1", r.pdb.Spec.MinAvailable)
	}
	if !ha {
		return
	}
	args := parseArgs(t, r.deployment.Spec.Template.Spec.Containers[0].Args)
	lease := args["leader-elect-lease-name"]
	journal := lease + "-intents" // the provider derives it from the lease's name
	if r.journal.Name != journal || len(r.journal.Data)+len(r.journal.BinaryData) != 0 {
		t.Errorf("journal ConfigMap %q with %d+%d keys, want %q, empty", r.journal.Name, len(r.journal.Data), len(r.journal.BinaryData), journal)
	}
	var getUpdate, create, journalRW bool
	for _, rule := range r.role.Rules {
		leases := slices.Equal(rule.APIGroups, []string{"coordination.k8s.io"}) && slices.Equal(rule.Resources, []string{"leases"})
		configMaps := slices.Equal(rule.APIGroups, []string{""}) && slices.Equal(rule.Resources, []string{"configmaps"})
		switch {
		case leases && slices.Equal(rule.Verbs, []string{"get", "update"}) && slices.Equal(rule.ResourceNames, []string{lease}):
			getUpdate = true
		case leases && slices.Equal(rule.Verbs, []string{"create"}) && len(rule.ResourceNames) == 0:
			create = true
		case configMaps && slices.Equal(rule.Verbs, []string{"get", "update"}) && slices.Equal(rule.ResourceNames, []string{journal}):
			journalRW = true
		default:
			t.Errorf("Role rule %+v grants more than get/update on lease %q, create on leases and get/update on ConfigMap %q", rule, lease, journal)
		}
	}
	if !getUpdate || !create || !journalRW || lease == "" || len(r.role.Rules) != 3 {
		t.Errorf("Role %+v: want get/update on lease %q, create on leases, get/update on ConfigMap %q", r.role.Rules, lease, journal)
	}
	b := r.roleBinding
	if b.RoleRef.Name != r.role.Name || len(b.Subjects) != 1 || b.Subjects[0].Name != r.serviceAccountName() {
		t.Errorf("RoleBinding %+v does not bind the Role to the pod's ServiceAccount", b)
	}
}

func (r *rendered) serviceAccountName() string {
	return r.deployment.Spec.Template.Spec.ServiceAccountName
}
