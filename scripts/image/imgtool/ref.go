package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// chartRef is the image the chart runs by default: values.yaml's
// image.repository at the chart's appVersion (the template's fallback
// when image.tag is empty). make image tags what it builds with it, so the
// chart's default reference names the image make image produces.
func chartRef(chart string) (repo, tag string, err error) {
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"image"`
	}
	if err := readYAML(filepath.Join(chart, "Chart.yaml"), &meta); err != nil {
		return "", "", err
	}
	if err := readYAML(filepath.Join(chart, "values.yaml"), &values); err != nil {
		return "", "", err
	}
	tag = values.Image.Tag
	if tag == "" {
		tag = meta.AppVersion
	}
	if values.Image.Repository == "" || tag == "" {
		return "", "", fmt.Errorf("%s: no image.repository or appVersion", chart)
	}
	return values.Image.Repository, tag, nil
}

func readYAML(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func runRef(args []string) error {
	fs := flag.NewFlagSet("ref", flag.ContinueOnError)
	chart := fs.String("chart", "helm/libvirt-provider", "chart directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	repo, tag, err := chartRef(*chart)
	if err != nil {
		return err
	}
	fmt.Printf("%s:%s\n", repo, tag)
	return nil
}
