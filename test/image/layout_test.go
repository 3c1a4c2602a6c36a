//go:build image

package image

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The OCI image layout make image writes, read with the standard library
// only (the image's own tools stay out of the provider's module).
type ociIndex struct {
	Manifests []ociDescriptor `json:"manifests"`
}

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

type ociManifest struct {
	Config ociDescriptor   `json:"config"`
	Layers []ociDescriptor `json:"layers"`
}

type ociConfig struct {
	Created string `json:"created"`
	Config  struct {
		User         string              `json:"User"`
		Env          []string            `json:"Env"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Labels       map[string]string   `json:"Labels"`
	} `json:"config"`
}

// imageResult is imgtool pack's OUT/image.json.
type imageResult struct {
	Reference       string `json:"reference"`
	Digest          string `json:"digest"`
	CompressedBytes int64  `json:"compressed_bytes"`
	UnpackedBytes   int64  `json:"unpacked_bytes"`
	Files           int    `json:"files"`
	Packages        int    `json:"packages"`
}

type ociImage struct {
	dir      string
	index    ociIndex
	manifest ociManifest
	config   ociConfig
	result   imageResult
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func blobPath(dir, digest string) string {
	algo, hex, _ := strings.Cut(digest, ":")
	return filepath.Join(dir, "blobs", algo, hex)
}

// readImage reads make image's output directory: image.json and the one
// image of oci/.
func readImage(t *testing.T, out string) ociImage {
	t.Helper()
	img := ociImage{dir: filepath.Join(out, "oci")}
	readJSON(t, filepath.Join(out, "image.json"), &img.result)
	readJSON(t, filepath.Join(img.dir, "index.json"), &img.index)
	if len(img.index.Manifests) != 1 {
		t.Fatalf("index.json has %d manifests, want 1", len(img.index.Manifests))
	}
	if d := img.index.Manifests[0].Digest; d != img.result.Digest {
		t.Fatalf("index.json names %s, image.json %s", d, img.result.Digest)
	}
	readJSON(t, blobPath(img.dir, img.result.Digest), &img.manifest)
	readJSON(t, blobPath(img.dir, img.manifest.Config.Digest), &img.config)
	return img
}

// layerFiles lists every path of the image's layers (no leading slash, no
// trailing slash on directories) with its type: 'd', 'f' or 'l' (symlink,
// with its target).
func (img ociImage) layerFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	img.walkLayers(t, func(h *tar.Header, _ io.Reader) {
		files[strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")] = kindOf(h)
	})
	return files
}

// fileSHA256 is the sha256 of one regular file of the image's layers.
func (img ociImage) fileSHA256(t *testing.T, name string) string {
	t.Helper()
	sum := ""
	img.walkLayers(t, func(h *tar.Header, r io.Reader) {
		if h.Name != name {
			return
		}
		d := sha256.New()
		if _, err := io.Copy(d, r); err != nil {
			t.Fatal(err)
		}
		sum = hex.EncodeToString(d.Sum(nil))
	})
	return sum
}

// walkLayers calls fn for every entry of every layer, in order, with a
// reader of the entry's contents.
func (img ociImage) walkLayers(t *testing.T, fn func(h *tar.Header, r io.Reader)) {
	t.Helper()
	for _, l := range img.manifest.Layers {
		f, err := os.Open(blobPath(img.dir, l.Digest))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			fn(h, tr)
		}
		f.Close()
	}
}

func kindOf(h *tar.Header) string {
	switch h.Typeflag {
	case tar.TypeDir:
		return "d"
	case tar.TypeSymlink:
		return "l " + h.Linkname
	default:
		return "f"
	}
}
