package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The same tree with different mtimes and extra-file map orders gives the
// same bytes; names are sorted and every time is the epoch.
func TestLayerIsReproducible(t *testing.T) {
	epoch := time.Unix(1700000000, 0)
	layer := func(touch time.Time) []byte {
		root := t.TempDir()
		for _, f := range []string{"usr/lib/b.so", "usr/lib/a.so", "etc/passwd"} {
			p := filepath.Join(root, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, touch, touch); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("usr/lib", filepath.Join(root, "lib")); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(t.TempDir(), "libvirt")
		if err := os.WriteFile(bin, []byte("\x7fELF"), 0o755); err != nil {
			t.Fatal(err)
		}
		entries, err := collect(root, map[string]string{"/usr/lib/zz": bin, "/etc/aa": bin})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		st, err := writeLayer(&buf, entries, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if st.Files != 5 || st.Symlinks != 1 {
			t.Fatalf("stats %+v, want 5 files and 1 symlink", st)
		}
		return buf.Bytes()
	}
	a, b := layer(time.Unix(1, 0)), layer(time.Now())
	if !bytes.Equal(a, b) {
		t.Fatal("same tree, different layer bytes")
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) || h.Uname != "" {
			t.Errorf("%s: mtime %v uname %q", h.Name, h.ModTime, h.Uname)
		}
		if h.Name == "usr/lib/zz" && (h.Uid != 0 || h.Mode&0o111 == 0) {
			t.Errorf("added file: uid %d mode %o, want root and executable", h.Uid, h.Mode)
		}
		names = append(names, h.Name)
	}
	want := "etc/ etc/aa etc/passwd lib usr/ usr/lib/ usr/lib/a.so usr/lib/b.so usr/lib/zz"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("entries %q\nwant    %q", got, want)
	}
}

func TestAllowList(t *testing.T) {
	pkgs := []pkg{
		{Name: "libc6", Version: "2.36", Kind: "deps"},
		{Name: "bash", Version: "5.2", Kind: "deps"},
		{Name: "genisoimage", Version: "1.1", Kind: "extra"},
	}
	bad, extra := checkAllowed(pkgs, map[string]bool{"libc6": true})
	if strings.Join(bad, ",") != "bash 5.2" || strings.Join(extra, ",") != "genisoimage" {
		t.Fatalf("bad %q extra %q", bad, extra)
	}
	// The committed allow-list parses and holds what the image is built for.
	allowed, err := readList("../allowlist.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"libvirt0", "libc6", "ca-certificates"} {
		if !allowed[p] {
			t.Errorf("allowlist.txt lacks %s", p)
		}
	}
	for _, p := range []string{"bash", "dash", "apt", "dpkg", "perl-base", "busybox"} {
		if allowed[p] {
			t.Errorf("allowlist.txt allows %s", p)
		}
	}
}

func TestSBOM(t *testing.T) {
	pkgs := []pkg{{"libvirt0", "1:9.0.0-4+deb12u2", "amd64", "ab12", "deps", "libvirt"}}
	doc := buildSBOM(pkgs, "bigfleet/libvirt-provider:0.1.0", "sha256:feed", time.Unix(0, 0))
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var back spdxDoc
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.SPDXVersion != "SPDX-2.3" || len(back.Packages) != 2 || len(back.Relationships) != 2 {
		t.Fatalf("doc %+v", back)
	}
	p := back.Packages[1]
	if p.VersionInfo != "1:9.0.0-4+deb12u2" || p.Checksums[0].Value != "ab12" ||
		p.ExternalRefs[0].Locator != "pkg:deb/debian/libvirt0@1%3A9.0.0-4%2Bdeb12u2?arch=amd64&distro=debian-12" {
		t.Errorf("package %+v", p)
	}
	if back.Packages[0].Checksums[0].Value != "feed" || back.CreationInfo.Created != "1970-01-01T00:00:00Z" {
		t.Errorf("image package %+v, created %s", back.Packages[0], back.CreationInfo.Created)
	}
}

func TestChartRef(t *testing.T) {
	repo, tag, err := chartRef("../../../helm/libvirt-provider")
	if err != nil {
		t.Fatal(err)
	}
	if repo == "" || tag == "" || strings.Contains(repo, ":") {
		t.Fatalf("ref %q:%q", repo, tag)
	}
}
