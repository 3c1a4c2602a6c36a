//go:build image

package image

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The parts of the rendered Deployment and ConfigMap the run uses
// (test/chart/render prints them, strictly decoded into the Kubernetes
// types there).
type rendered struct {
	Deployment struct {
		Spec struct {
			Template struct {
				Spec podSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	} `json:"deployment"`
	ConfigMap struct {
		Data map[string]string `json:"data"`
	} `json:"configMap"`
}

type podSpec struct {
	SecurityContext struct {
		RunAsUser          *int64          `json:"runAsUser"`
		RunAsGroup         *int64          `json:"runAsGroup"`
		FSGroup            *int64          `json:"fsGroup"`
		SupplementalGroups []int64         `json:"supplementalGroups"`
		SeccompProfile     *seccompProfile `json:"seccompProfile"`
	} `json:"securityContext"`
	Containers []container `json:"containers"`
	Volumes    []volume    `json:"volumes"`
}

type seccompProfile struct {
	Type string `json:"type"`
}

type container struct {
	Image   string   `json:"image"`
	Command []string `json:"command"`
	Args    []string `json:"args"`
	Env     []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
	SecurityContext struct {
		RunAsUser                *int64          `json:"runAsUser"`
		RunAsGroup               *int64          `json:"runAsGroup"`
		RunAsNonRoot             *bool           `json:"runAsNonRoot"`
		Privileged               *bool           `json:"privileged"`
		AllowPrivilegeEscalation *bool           `json:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool           `json:"readOnlyRootFilesystem"`
		SeccompProfile           *seccompProfile `json:"seccompProfile"`
		Capabilities             struct {
			Add  []string `json:"add"`
			Drop []string `json:"drop"`
		} `json:"capabilities"`
	} `json:"securityContext"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly"`
	} `json:"volumeMounts"`
}

type volume struct {
	Name     string `json:"name"`
	EmptyDir *struct {
		Medium    string `json:"medium"`
		SizeLimit string `json:"sizeLimit"`
	} `json:"emptyDir"`
	ConfigMap *struct {
		DefaultMode *int32 `json:"defaultMode"`
	} `json:"configMap"`
	PersistentVolumeClaim *struct {
		ClaimName string `json:"claimName"`
	} `json:"persistentVolumeClaim"`
	HostPath *struct {
		Path string `json:"path"`
		Type string `json:"type"`
	} `json:"hostPath"`
	Secret *struct {
		SecretName string `json:"secretName"`
	} `json:"secret"`
}

// chartValues is the values file the run renders the chart with: socket
// mode on this host's libvirtd, the test guest's image and kernel, ports
// the test picked (the container shares the host's network), one replica
// without leader election.
type chartValues struct {
	Provider string `json:"provider"`
	// One replica without leader election: the run is one container on
	// this host, outside any cluster (no Lease to campaign for).
	Replicas       int `json:"replicas"`
	LeaderElection struct {
		Enabled bool `json:"enabled"`
	} `json:"leaderElection"`
	Libvirt struct {
		Mode   string              `json:"mode"`
		Hosts  []map[string]string `json:"hosts"`
		Socket struct {
			Path    string `json:"path"`
			GroupID int    `json:"groupId"`
		} `json:"socket"`
	} `json:"libvirt"`
	Storage struct {
		Image string `json:"image"`
		Pool  string `json:"pool"`
	} `json:"storage"`
	Network string `json:"network"`
	Kernel  struct {
		Path    string `json:"path"`
		Initrd  string `json:"initrd"`
		Cmdline string `json:"cmdline"`
	} `json:"kernel"`
	DomainType        string `json:"domainType"`
	ReconcileInterval string `json:"reconcileInterval"`
	Capacity          struct {
		SeedCount int `json:"seedCount"`
	} `json:"capacity"`
	GRPC struct {
		Port int `json:"port"`
	} `json:"grpc"`
	Metrics struct {
		Port int `json:"port"`
	} `json:"metrics"`
}

// renderChart is helm template of helm/libvirt-provider with vals (JSON is
// YAML), through test/chart/render.
func renderChart(t *testing.T, vals chartValues) rendered {
	t.Helper()
	b, err := json.Marshal(vals)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./render", "-f", path)
	cmd.Dir = filepath.Join(repoRoot, "test", "chart")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("render the chart: %v\n%s", err, stderrOf(err))
	}
	var r rendered
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Deployment.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("rendered Deployment has %d containers, want 1", len(r.Deployment.Spec.Template.Spec.Containers))
	}
	return r
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
