package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entrypoint and user: the chart's container command and securityContext
// (test/chart checks the Dockerfile's; test/image runs this image with the
// rendered chart's).
const (
	entrypoint = "/usr/local/bin/libvirt"
	imageUser  = "65532:65532"
)

// Result is written to OUT/image.json: what make image prints and the
// tests read.
type Result struct {
	Reference       string `json:"reference"`        // repository:tag
	Digest          string `json:"digest"`           // manifest digest
	CompressedBytes int64  `json:"compressed_bytes"` // manifest + config + gzipped layer
	UnpackedBytes   int64  `json:"unpacked_bytes"`   // regular files' content
	Files           int    `json:"files"`
	Packages        int    `json:"packages,omitempty"`
}

type addFlag map[string]string

func (a addFlag) String() string { return fmt.Sprint(map[string]string(a)) }
func (a addFlag) Set(s string) error {
	dst, src, ok := strings.Cut(s, "=")
	if !ok || !strings.HasPrefix(dst, "/") {
		return fmt.Errorf("-add %q: want /image/path=host/path", s)
	}
	a[dst] = src
	return nil
}

func runPack(args []string) error {
	fs := flag.NewFlagSet("pack", flag.ContinueOnError)
	rootfs := fs.String("rootfs", "", "root filesystem directory")
	out := fs.String("out", "", "output directory (oci/, libvirt-provider.tar, image.json)")
	ref := fs.String("ref", "", "repository:tag")
	epoch := fs.Int64("epoch", 0, "SOURCE_DATE_EPOCH: every timestamp in the image")
	revision := fs.String("revision", "", "source revision (label)")
	packages := fs.Int("packages", 0, "number of Debian packages in the root filesystem (reported)")
	extra := addFlag{}
	fs.Var(extra, "add", "/image/path=host/path (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rootfs == "" || *out == "" || *ref == "" || *epoch <= 0 {
		return fmt.Errorf("-rootfs, -out, -ref and -epoch are required")
	}
	tag, err := name.NewTag(*ref, name.WithDefaultRegistry(""))
	if err != nil {
		return err
	}
	created := time.Unix(*epoch, 0).UTC()

	entries, err := collect(*rootfs, extra)
	if err != nil {
		return err
	}
	layerPath := filepath.Join(*out, "layer.tar")
	f, err := os.Create(layerPath)
	if err != nil {
		return err
	}
	st, err := writeLayer(f, entries, created)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	defer os.Remove(layerPath)
	img, err := buildImage(layerPath, created, tag, *revision)
	if err != nil {
		return err
	}
	res, err := writeOutputs(img, *out, tag)
	if err != nil {
		return err
	}
	res.UnpackedBytes, res.Files, res.Packages = st.Bytes, st.Files, *packages
	fmt.Printf("image %s %s\n  compressed %.1f MiB (%d bytes), unpacked %.1f MiB (%d bytes), %d files, %d Debian packages\n",
		res.Reference, res.Digest, mib(res.CompressedBytes), res.CompressedBytes,
		mib(res.UnpackedBytes), res.UnpackedBytes, res.Files, res.Packages)
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*out, "image.json"), append(b, '\n'), 0o644)
}

// buildImage is one layer on nothing, OCI media types, the config and
// history stamped with created.
func buildImage(layerPath string, created time.Time, tag name.Tag, revision string) (v1.Image, error) {
	layer, err := tarball.LayerFromFile(layerPath, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: created},
		CreatedBy: "make image (scripts/image/build.sh)",
		Comment:   "Debian 12 packages (scripts/image/packages.txt) and the provider binary",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: created}
	cf.Config = v1.Config{
		User:       imageUser,
		Entrypoint: []string{entrypoint},
		// libvirt's client and libssh look for per-user files under HOME.
		Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"},
		ExposedPorts: map[string]struct{}{"9000/tcp": {}, "9090/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "BigFleet libvirt capacity provider",
			"org.opencontainers.image.source":   "https://github.com/bigfleet/libvirt-provider",
			"org.opencontainers.image.version":  tag.TagStr(),
			"org.opencontainers.image.revision": revision,
			"org.opencontainers.image.created":  created.Format(time.RFC3339),
		},
	}
	return mutate.ConfigFile(img, cf)
}

// writeOutputs writes OUT/oci (an OCI image layout, the image under
// ref.name = tag) and OUT/libvirt-provider.tar (docker load, kind load
// image-archive, ctr images import), both from scratch.
func writeOutputs(img v1.Image, out string, tag name.Tag) (Result, error) {
	var res Result
	dir := filepath.Join(out, "oci")
	if err := os.RemoveAll(dir); err != nil {
		return res, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return res, err
	}
	ref := tag.Repository.RepositoryStr() + ":" + tag.TagStr()
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          ref,
	})); err != nil {
		return res, err
	}
	if err := tarball.WriteToFile(filepath.Join(out, "libvirt-provider.tar"), tag, img); err != nil {
		return res, err
	}
	digest, err := img.Digest()
	if err != nil {
		return res, err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return res, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return res, err
	}
	res = Result{Reference: ref, Digest: digest.String(), CompressedBytes: int64(len(manifest) + len(config))}
	layers, err := img.Layers()
	if err != nil {
		return res, err
	}
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return res, err
		}
		res.CompressedBytes += n
	}
	return res, nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
