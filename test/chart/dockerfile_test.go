package chart

import (
	"bufio"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// imageUID is the non-root user of the image and of the chart's pods.
const imageUID = 65532

// stage is one FROM section of a Dockerfile.
type stage struct {
	from, name string
	instrs     []instr
}

type instr struct{ cmd, args string }

// parseDockerfile reads instructions (continuations joined, comments and
// parser directives dropped) grouped by stage.
func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages []stage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		cmd = strings.ToUpper(cmd)
		args = strings.TrimSpace(args)
		if cmd == "FROM" {
			fields := strings.Fields(args)
			s := stage{from: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				s.name = fields[2]
			}
			stages = append(stages, s)
			return
		}
		if len(stages) == 0 {
			if cmd != "ARG" {
				t.Fatalf("%s before the first FROM", cmd)
			}
			return
		}
		s := &stages[len(stages)-1]
		s.instrs = append(s.instrs, instr{cmd, args})
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trim := strings.TrimSpace(line)
		if strings.HasPrefix(trim, "#") {
			continue
		}
		if strings.HasSuffix(trim, "\\") {
			cur.WriteString(strings.TrimSuffix(trim, "\\") + " ")
			continue
		}
		cur.WriteString(trim)
		flush()
	}
	flush()
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

func (s stage) all(cmd string) []string {
	var out []string
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

func (s stage) last(cmd string) string {
	all := s.all(cmd)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1]
}

var aptInstall = regexp.MustCompile(`apt-get install ([^&;|]*)`)

// aptPackages lists what a stage's RUN lines apt-get install.
func (s stage) aptPackages() []string {
	var out []string
	for _, run := range s.all("RUN") {
		for _, m := range aptInstall.FindAllStringSubmatch(run, -1) {
			for _, w := range strings.Fields(m[1]) {
				if !strings.HasPrefix(w, "-") && !strings.HasPrefix(w, "$") {
					out = append(out, w)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

const dockerfile = "../../Dockerfile"

func TestDockerfileMatchesChart(t *testing.T) {
	t.Parallel()
	stages := parseDockerfile(t, dockerfile)
	if len(stages) != 3 || stages[0].name != "build" || stages[1].name != "rootfs" || stages[2].name != "runtime" {
		t.Fatalf("want three stages, build, rootfs then runtime; got %+v", stages)
	}
	build, rootfs, rt := stages[0], stages[1], stages[2]

	if !strings.HasPrefix(build.from, "golang:1.26") || !strings.Contains(build.from, "bookworm") {
		t.Errorf("build stage FROM %s: want golang:1.26 on bookworm", build.from)
	}
	if !equal(build.aptPackages(), []string{"libvirt-dev", "pkg-config"}) {
		t.Errorf("build stage installs %v, want libvirt-dev pkg-config", build.aptPackages())
	}
	var buildCmd string
	for _, r := range build.all("RUN") {
		if strings.Contains(r, "go build") {
			buildCmd = r
		}
	}
	for _, want := range []string{"CGO_ENABLED=1", "-trimpath", `-ldflags "-s -w"`, "-o /out/libvirt ./cmd/libvirt"} {
		if !strings.Contains(buildCmd, want) {
			t.Errorf("build stage go build lacks %s (make image builds the binary the same way); got %q", want, buildCmd)
		}
	}

	// The root filesystem comes from make image's own script and package
	// list (test/image compares the two images' files).
	if rootfs.from != "debian:12" {
		t.Errorf("rootfs FROM %s: want debian:12 (bookworm, like the build stage)", rootfs.from)
	}
	if got := rootfs.all("RUN"); len(got) != 1 || got[0] != "/src/scripts/image/rootfs.sh /rootfs /packages.tsv $EXTRA_PACKAGES" {
		t.Errorf("rootfs RUN %q: want scripts/image/rootfs.sh alone", got)
	}
	if args := rootfs.all("ARG"); len(args) != 1 || args[0] != `EXTRA_PACKAGES=""` {
		t.Errorf("rootfs ARGs %q: want only EXTRA_PACKAGES, empty by default", args)
	}

	if rt.from != "scratch" {
		t.Errorf("runtime FROM %s: want scratch (nothing but the rootfs stage's tree)", rt.from)
	}
	if len(rt.all("RUN")) != 0 {
		t.Error("runtime must not RUN anything: it has no shell")
	}
	wantCopies := []string{"--from=rootfs /rootfs/ /", "--from=build /out/libvirt " + chartBinary}
	if got := rt.all("COPY"); !equal(got, wantCopies) {
		t.Errorf("runtime COPY %q, want %q", got, wantCopies)
	}

	// USER and ENTRYPOINT against what the chart runs.
	d := renderAndDecode(t, "default").deployment
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	wantUser := itoa(int32(ptrInt(pod.SecurityContext.RunAsUser))) + ":" + itoa(int32(ptrInt(pod.SecurityContext.RunAsGroup)))
	if user := rt.last("USER"); user != wantUser || user != "65532:65532" {
		t.Errorf("runtime USER %q, chart runs as %s", user, wantUser)
	}
	var entry []string
	if err := json.Unmarshal([]byte(rt.last("ENTRYPOINT")), &entry); err != nil {
		t.Fatalf("ENTRYPOINT must be exec form (no shell to run a string): %v", err)
	}
	if !equal(entry, c.Command) {
		t.Errorf("ENTRYPOINT %q, chart command %q", entry, c.Command)
	}
	if rt.last("CMD") != "" {
		t.Error("runtime must not set CMD: the chart passes all arguments")
	}
	for _, p := range []string{"9000", "9090"} {
		if !strings.Contains(rt.last("EXPOSE"), p) {
			t.Errorf("EXPOSE lacks %s", p)
		}
	}
}

// sonamePackage maps the shared libraries the provider can need to the
// Debian 12 package that ships them. Each must be in the image: named in
// scripts/image/packages.txt or brought in by one that is (the allow-list,
// scripts/image/allowlist.txt, is that closure).
var sonamePackage = map[string]string{
	"libvirt.so.0":       "libvirt0",
	"libvirt-qemu.so.0":  "libvirt0",
	"libvirt-lxc.so.0":   "libvirt0",
	"libvirt-admin.so.0": "libvirt0",
	"libc.so.6":          "libc6",
	"libm.so.6":          "libc6",
	"libpthread.so.0":    "libc6",
	"libdl.so.2":         "libc6",
	"libresolv.so.2":     "libc6",
}

func TestBinaryLibrariesMatchRuntimeStage(t *testing.T) {
	t.Parallel()
	bin := binaryPath()
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CHART_REQUIRE_BINARY") == "1" {
			t.Fatalf("provider binary %s: %v", bin, err)
		}
		t.Skipf("no provider binary at %s: shared libraries not checked", bin)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	needed, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(needed)
	t.Logf("DT_NEEDED: %v", needed)

	required := map[string]bool{}
	for _, lib := range needed {
		pkg, ok := sonamePackage[lib]
		if !ok {
			t.Errorf("the binary needs %s, which no runtime package is known to provide: add its package to the runtime stage and to sonamePackage", lib)
			continue
		}
		required[pkg] = true
		checkDpkgOwner(t, lib, pkg)
	}
	// Built with -tags libvirt_dlopen the binary loads libvirt.so.0 at run
	// time instead of linking it: libvirt0 is still required.
	if info, err := buildinfo.ReadFile(bin); err == nil {
		for _, s := range info.Settings {
			if s.Key == "-tags" && strings.Contains(s.Value, "libvirt_dlopen") {
				required["libvirt0"] = true
			}
		}
	}
	if !required["libvirt0"] {
		t.Errorf("the binary neither links nor dlopens libvirt (DT_NEEDED %v): is the libvirt backend wired into cmd/libvirt?", needed)
	}

	roots, data := imagePackages(t)
	closure := readNames(t, "../../scripts/image/allowlist.txt")
	for pkg := range required {
		if !closure[pkg] {
			t.Errorf("the binary needs %s but the image (scripts/image/allowlist.txt) does not hold it", pkg)
		}
	}
	for pkg := range roots {
		if !required[pkg] && !data[pkg] {
			t.Errorf("scripts/image/packages.txt installs %s with its dependencies, which the binary does not need", pkg)
		}
	}
}

// imagePackages reads scripts/image/packages.txt: the packages installed
// with their dependencies, and the data-only ones.
func imagePackages(t *testing.T) (roots, data map[string]bool) {
	t.Helper()
	roots, data = map[string]bool{}, map[string]bool{}
	for _, line := range readLines(t, "../../scripts/image/packages.txt") {
		f := strings.Fields(line)
		if len(f) != 2 || (f[1] != "deps" && f[1] != "data") {
			t.Fatalf("packages.txt line %q: want <package> deps|data", line)
		}
		roots[f[0]] = true
		if f[1] == "data" {
			data[f[0]] = true
		}
	}
	return roots, data
}

func readNames(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, line := range readLines(t, path) {
		out[strings.Fields(line)[0]] = true
	}
	return out
}

// readLines returns a file's lines, blank ones and # comments dropped.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// checkDpkgOwner confirms the soname→package table on this (Debian 12)
// machine, where the binary was linked: ldconfig finds the library, dpkg
// names its package. Skipped quietly where either tool is missing.
func checkDpkgOwner(t *testing.T, lib, want string) {
	t.Helper()
	out, err := exec.Command("ldconfig", "-p").Output()
	if err != nil {
		return
	}
	var path string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 0 && fields[0] == lib && strings.Contains(line, "x86-64") {
			path = fields[len(fields)-1]
			break
		}
	}
	if path == "" {
		t.Errorf("ldconfig does not know %s", lib)
		return
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path
	}
	for _, p := range []string{path, real, strings.Replace(real, "/usr/lib/", "/lib/", 1)} {
		owner, err := exec.Command("dpkg", "-S", p).Output()
		if err != nil {
			continue
		}
		pkg, _, _ := strings.Cut(strings.TrimSpace(string(owner)), ":")
		if pkg != want {
			t.Errorf("%s (%s) belongs to %s, the table says %s", lib, p, pkg, want)
		}
		return
	}
	t.Logf("dpkg does not know who owns %s; table entry %s not confirmed", path, want)
}

func TestDockerignoreKeepsContextSmall(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, must := range []string{".git", "bin"} {
		if !lines[must] {
			t.Errorf(".dockerignore must exclude %s", must)
		}
	}
	for _, keep := range []string{"go.mod", "go.sum", "cmd", "server", "backend", "gen"} {
		if lines[keep] {
			t.Errorf(".dockerignore excludes %s, which the build needs", keep)
		}
	}
}
