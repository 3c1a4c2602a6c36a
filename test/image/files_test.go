//go:build image

package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTwoBuildsOneDigest builds the image again, at make image's
// timestamp and revision label, and wants every output byte for byte:
// the manifest digest, the docker-load tarball, the SBOM and the package
// list.
func TestTwoBuildsOneDigest(t *testing.T) {
	first := imageOut(t)
	img := readImage(t, first)
	created, err := time.Parse(time.RFC3339, img.config.Created)
	if err != nil {
		t.Fatal(err)
	}
	second := t.TempDir()
	cmd := exec.Command(filepath.Join(repoRoot, "scripts", "image", "build.sh"), second)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(created.Unix(), 10),
		"IMAGE_REVISION="+img.config.Config.Labels["org.opencontainers.image.revision"])
	t0 := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("second build: %v\n%s", err, out)
	}
	t.Logf("second build in %s", time.Since(t0).Round(time.Second))
	again := readImage(t, second)
	if again.result.Digest != img.result.Digest {
		const bin = "usr/local/bin/libvirt"
		if a, b := img.fileSHA256(t, bin), again.fileSHA256(t, bin); a != b {
			t.Errorf("the provider binary differs between make image and this build (%s / %s): "+
				"did the source tree change in between? In a clean checkout it must not.", a, b)
		}
		t.Errorf("two builds, two digests: %s and %s (config %s / %s, layer %v / %v)",
			img.result.Digest, again.result.Digest, img.manifest.Config.Digest, again.manifest.Config.Digest,
			img.manifest.Layers, again.manifest.Layers)
	}
	for _, f := range []string{"libvirt-provider.tar", "sbom.spdx.json", "packages.tsv", "image.json"} {
		a, errA := os.ReadFile(filepath.Join(first, f))
		b, errB := os.ReadFile(filepath.Join(second, f))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs between the two builds (%v, %v)", f, errA, errB)
		}
	}
	t.Logf("digest %s; compressed %d bytes, unpacked %d bytes, %d files, %d packages",
		img.result.Digest, img.result.CompressedBytes, img.result.UnpackedBytes, img.result.Files, img.result.Packages)
}

// TestDockerfileSameFiles derives the file set of the Dockerfile's runtime
// stage without an engine: the rootfs stage's COPY lines are applied to a
// temporary directory standing for the stage's root (so the script runs
// with exactly the files the stage gives it: rootfs.sh, packages.txt and
// the apt sources and pins of scripts/image/apt), its RUN line is run there,
// then the runtime stage's COPY lines are applied.
// That set, and the stage's ENV, USER, ENTRYPOINT and EXPOSE, must be make
// image's. It cannot prove what apt inside debian:12 would resolve on
// another day (docs/image.md).
func TestDockerfileSameFiles(t *testing.T) {
	img := readImage(t, imageOut(t))
	stages := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	rootfs, runtime := stages["rootfs"], stages["runtime"]
	if rootfs == nil || runtime == nil || runtime.from != "scratch" {
		t.Fatalf("Dockerfile: want a rootfs stage and a runtime stage FROM scratch; got %v", stages)
	}
	runs := rootfs.all("RUN")
	if len(runs) != 1 {
		t.Fatalf("rootfs stage RUN %q: want one", runs)
	}
	work := t.TempDir()
	// The stage's root is work: its COPY lines copy from the build context
	// (the repository) into it, and every absolute path lands under it.
	for _, cp := range rootfs.all("COPY") {
		copyFromContext(t, cp, work)
	}
	args := strings.Fields(runs[0])
	for i, a := range args {
		switch {
		case a == "$EXTRA_PACKAGES":
			args[i] = "" // its ARG default
		case strings.HasPrefix(a, "/"):
			args[i] = filepath.Join(work, a)
		}
	}
	args = slices.DeleteFunc(args, func(a string) bool { return a == "" })
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("rootfs stage %q: %v\n%s", runs[0], err, out)
	}
	if a, b := readFile(filepath.Join(work, "packages.tsv")), readFile(filepath.Join(imageOut(t), "packages.tsv")); a != b {
		t.Errorf("the rootfs stage resolved other packages than make image:\n%s\nvs\n%s", a, b)
	}

	want := map[string]string{}
	for _, cp := range runtime.all("COPY") {
		f := strings.Fields(cp)
		if len(f) != 3 || !strings.HasPrefix(f[0], "--from=") {
			t.Fatalf("runtime COPY %q: want --from=STAGE SRC DST", cp)
		}
		switch from := strings.TrimPrefix(f[0], "--from="); from {
		case "rootfs":
			if f[2] != "/" {
				t.Fatalf("COPY %q: the rootfs stage's tree must land at /", cp)
			}
			addTree(t, filepath.Join(work, f[1]), want)
		case "build":
			// The binary: a file at its destination (make image adds it the same way).
			want[strings.TrimPrefix(f[2], "/")] = "f"
		default:
			t.Fatalf("COPY from stage %q", from)
		}
	}
	got := img.layerFiles(t)
	var diff []string
	for p, k := range want {
		if got[p] != k {
			diff = append(diff, fmt.Sprintf("Dockerfile %s %q, make image %q", p, k, got[p]))
		}
	}
	for p, k := range got {
		if _, ok := want[p]; !ok {
			diff = append(diff, fmt.Sprintf("make image only: %s %q", p, k))
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Errorf("%d differences:\n  %s", len(diff), strings.Join(diff, "\n  "))
	}
	t.Logf("%d paths alike", len(want))

	cfg := img.config.Config
	if env := strings.Fields(runtime.last("ENV")); !slices.Equal(env, cfg.Env) {
		t.Errorf("Dockerfile ENV %q, make image %q", env, cfg.Env)
	}
	if user := runtime.last("USER"); user != cfg.User {
		t.Errorf("Dockerfile USER %q, make image %q", user, cfg.User)
	}
	var entry []string
	if err := json.Unmarshal([]byte(runtime.last("ENTRYPOINT")), &entry); err != nil || !slices.Equal(entry, cfg.Entrypoint) {
		t.Errorf("Dockerfile ENTRYPOINT %q (%v), make image %q", entry, err, cfg.Entrypoint)
	}
	var ports []string
	for p := range cfg.ExposedPorts {
		ports = append(ports, strings.TrimSuffix(p, "/tcp"))
	}
	sort.Strings(ports)
	if expose := strings.Fields(runtime.last("EXPOSE")); !slices.Equal(expose, ports) {
		t.Errorf("Dockerfile EXPOSE %q, make image %q", expose, ports)
	}
}

// copyFromContext applies a rootfs-stage COPY line, "SRC... DST", from the
// build context (the repository) to the stage root: a file lands in DST
// (a directory when DST ends in /), a directory's contents are copied into
// DST. Anything else (--from, heredocs, globs) is not emulated.
func copyFromContext(t *testing.T, line, stageRoot string) {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 2 || strings.HasPrefix(f[0], "--") || strings.Contains(line, "<<") || strings.ContainsAny(line, "*?[") {
		t.Fatalf("rootfs COPY %q: only SRC... DST from the build context is emulated", line)
	}
	srcs, dst := f[:len(f)-1], filepath.Join(stageRoot, f[len(f)-1])
	if len(srcs) > 1 && !strings.HasSuffix(f[len(f)-1], "/") {
		t.Fatalf("rootfs COPY %q: several sources need a DST ending in /", line)
	}
	for _, src := range srcs {
		from := filepath.Join(repoRoot, src)
		st, err := os.Stat(from)
		if err != nil {
			t.Fatalf("rootfs COPY %q: %v", line, err)
		}
		if st.IsDir() {
			if err := os.CopyFS(dst, os.DirFS(from)); err != nil {
				t.Fatalf("rootfs COPY %q: %v", line, err)
			}
			continue
		}
		to := dst
		if strings.HasSuffix(f[len(f)-1], "/") {
			to = filepath.Join(dst, filepath.Base(src))
		}
		b, err := os.ReadFile(from)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(to), 0o755)
		}
		if err == nil {
			err = os.WriteFile(to, b, st.Mode().Perm())
		}
		if err != nil {
			t.Fatalf("rootfs COPY %q: %v", line, err)
		}
	}
}

// addTree adds dir's files, as layerFiles names them, to set.
func addTree(t *testing.T, dir string, set map[string]string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case d.IsDir():
			set[rel] = "d"
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			set[rel] = "l " + target
		default:
			set[rel] = "f"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A Dockerfile stage: its base and instructions (continuations joined,
// comments dropped).
type dfStage struct {
	from   string
	instrs [][2]string
}

func (s *dfStage) all(cmd string) []string {
	var out []string
	for _, in := range s.instrs {
		if in[0] == cmd {
			out = append(out, in[1])
		}
	}
	return out
}

func (s *dfStage) last(cmd string) string {
	all := s.all(cmd)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1]
}

func parseDockerfile(t *testing.T, path string) map[string]*dfStage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stages := map[string]*dfStage{}
	var cur *dfStage
	var line strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(text, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(text, "\\"); ok {
			line.WriteString(s + " ")
			continue
		}
		line.WriteString(text)
		full := strings.TrimSpace(line.String())
		line.Reset()
		cmd, args, _ := strings.Cut(full, " ")
		cmd = strings.ToUpper(cmd)
		switch {
		case full == "":
		case cmd == "FROM":
			f := strings.Fields(args)
			cur = &dfStage{from: f[0]}
			if len(f) == 3 {
				stages[f[2]] = cur
			}
		case cur != nil:
			cur.instrs = append(cur.instrs, [2]string{cmd, strings.TrimSpace(args)})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

// TestOutputsReadBack: skopeo, an independent reader, finds the same image
// config in the OCI layout and in the docker-load tarball, and the tarball
// carries the reference the chart runs.
func TestOutputsReadBack(t *testing.T) {
	out := imageOut(t)
	img := readImage(t, out)
	tag := img.index.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
	for _, ref := range []string{"oci:" + img.dir + ":" + tag, "docker-archive:" + filepath.Join(out, "libvirt-provider.tar")} {
		cfg, err := exec.Command("skopeo", "inspect", "--config", "--raw", ref).Output()
		if err != nil {
			t.Fatalf("skopeo inspect %s: %v\n%s", ref, err, stderrOf(err))
		}
		if d := fmt.Sprintf("sha256:%x", sha256.Sum256(cfg)); d != img.manifest.Config.Digest {
			t.Errorf("%s: config %s, the OCI manifest's %s", ref, d, img.manifest.Config.Digest)
		}
	}
	var manifest []struct{ RepoTags []string }
	if err := json.Unmarshal([]byte(tarMember(t, filepath.Join(out, "libvirt-provider.tar"), "manifest.json")), &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{img.result.Reference}) {
		t.Errorf("docker tarball tags %+v, want [%s]", manifest, img.result.Reference)
	}
	if ann := img.index.Manifests[0].Annotations["io.containerd.image.name"]; ann != img.result.Reference {
		t.Errorf("OCI layout names %q for containerd, want %s", ann, img.result.Reference)
	}
}

// tarMember returns one member of an uncompressed tar file.
func tarMember(t *testing.T, path, name string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no %s (%v)", path, name, err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
}
