// Command render is `helm template` of the chart for the image run test
// (test/image): it renders helm/libvirt-provider with a values file through
// Helm's Go packages, decodes the Deployment and the ConfigMap strictly into
// the Kubernetes types, and prints them as one JSON object
// {"deployment": ..., "configMap": ...}. test/image takes the container's
// command, arguments, environment, mounts and security settings from it, so
// the image is run as the chart runs it, not as a copy of the chart says.
//
//	go run ./render -f values.yaml [-chart DIR]
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Rendered is what render prints.
type Rendered struct {
	Deployment appsv1.Deployment `json:"deployment"`
	ConfigMap  corev1.ConfigMap  `json:"configMap"`
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

func main() {
	chartDir := flag.String("chart", "../../helm/libvirt-provider", "chart directory")
	valuesPath := flag.String("f", "", "values file")
	release := flag.String("release", "bf", "release name")
	namespace := flag.String("namespace", "bigfleet-system", "namespace")
	flag.Parse()
	out, err := render(*chartDir, *valuesPath, *release, *namespace)
	if err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func render(chartDir, valuesPath, release, namespace string) (*Rendered, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	vals := map[string]any{}
	if valuesPath != "" {
		v, err := common.ReadValuesFile(valuesPath)
		if err != nil {
			return nil, err
		}
		vals = v.AsMap()
	}
	opts := common.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}
	rv, err := util.ToRenderValues(ch, vals, opts, common.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	r := &Rendered{}
	if err := decodeOne(files, ch.Name()+"/templates/deployment.yaml", &r.Deployment); err != nil {
		return nil, err
	}
	if err := decodeOne(files, ch.Name()+"/templates/configmap.yaml", &r.ConfigMap); err != nil {
		return nil, err
	}
	return r, nil
}

// decodeOne strictly decodes the single document of a rendered template.
func decodeOne(files map[string]string, name string, into any) error {
	text, ok := files[name]
	if !ok {
		return fmt.Errorf("%s not rendered", name)
	}
	var docs [][]byte
	for _, d := range docSep.Split(text, -1) {
		if len(bytes.TrimSpace(stripComments([]byte(d)))) > 0 {
			docs = append(docs, []byte(d))
		}
	}
	if len(docs) != 1 {
		return fmt.Errorf("%s: %d documents, want 1", name, len(docs))
	}
	if err := yaml.UnmarshalStrict(docs[0], into); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
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
