//go:build integration && lab

package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
)

// TestLabNoSecretsInLogs (check 4): one machine on lab1 (qemu+tls, libvirt
// 9.0) and one on lab2 (qemu+libssh, 11.3) go through Create, Configure
// with a 64 KiB bootstrap blob carrying a random marker, Drain and Delete.
// Afterwards neither the blob (raw or base64, in every alignment) nor the
// provider's TLS client key nor its SSH private key shows in: the
// provider's log (at debug), its /metrics, the CapacityProvider and admin
// API answers (as protobuf and as JSON), any lab host's libvirtd log
// (debug for all but the agent modules) written meanwhile, or the hosts'
// QEMU logs. Each place is checked to be non-empty and, for the logs, at
// debug, so the test cannot pass by looking at nothing.
func TestLabNoSecretsInLogs(t *testing.T) {
	e := loadLab(t)
	const name = "lab-sec"
	all := e.labHosts(t, e.Hosts)
	hosts := all.only("lab1", "lab2")
	if len(hosts.Hosts) != 2 {
		t.Fatalf("want lab1 and lab2 in %s, have %+v", e.Hosts, hosts)
	}
	blob, needles := secretsBlob(t)
	needles = append(needles, secretsKeyLines(t, filepath.Join(e.State, "creds", "lab1", "clientkey.pem"), "lab1 TLS client key")...)
	needles = append(needles, secretsKeyLines(t, filepath.Join(e.State, "creds", "lab2", "id_ed25519"), "lab2 SSH private key")...)

	// Host logs from now on (they are shared, and hundreds of MB).
	marks := map[string]int64{}
	for _, h := range all.Hosts {
		marks[h.Name] = labLogMark(e.hostFile(h.Name, "var/log/libvirt/libvirtd.log"))
	}
	metrics := freeAddr(t)
	p := startLab(t, e, name, hosts, 1, []string{"--metrics-addr=" + metrics}, "lab1", "lab2")
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()

	ids := []string{p.slotIn(t, "lab1"), p.slotIn(t, "lab2")}
	doms := p.createIdle(t, ids...)
	domains := map[string]string{} // host -> domain
	for i, id := range ids {
		domains[refHost(p.machine(t, id))] = doms[i]
	}
	if domains["lab1"] == "" || domains["lab2"] == "" {
		t.Fatalf("machines not on lab1 and lab2: %v", domains)
	}
	for _, id := range ids {
		p.mutate(t, "Configure", &pb.ConfigureRequest{MachineId: id, ClusterId: "c-lab-sec", BootstrapBlob: blob})
	}
	for _, id := range ids {
		p.await(t, id, 4*time.Minute, pb.MachineState_MACHINE_STATE_CONFIGURED)
	}
	// The blob reached each guest whole (so it did cross both transports).
	for h, dom := range domains {
		if got := labAgentCat(t, e, h, dom, "/run/bigfleet/blob.sha256"); got != sha(blob) {
			t.Fatalf("blob sha256 in the guest on %s: %q, want %s", h, got, sha(blob))
		}
	}
	answers := secretsAnswers(t, ctx, p, ids)
	for _, id := range ids {
		p.mutate(t, "Drain", &pb.DrainRequest{MachineId: id, GracePeriodSeconds: 1})
	}
	for _, id := range ids {
		p.await(t, id, 2*time.Minute, pb.MachineState_MACHINE_STATE_IDLE)
	}
	for _, id := range ids {
		p.mutate(t, "Delete", &pb.DeleteRequest{MachineId: id})
	}
	for _, id := range ids {
		p.await(t, id, 2*time.Minute, pb.MachineState_MACHINE_STATE_SPECULATIVE)
	}
	answers += secretsAnswers(t, ctx, p, ids)

	// Where to look, each with what proves it is not empty or quiet. The
	// host logs are read from the marks on, in chunks: they are shared
	// and grow by MB/s at debug.
	places := []secretsPlace{
		{name: "provider log", text: p.out.String(), evidence: []string{"level=DEBUG", "level=INFO", ids[0], ids[1]}},
		{name: "CapacityProvider and admin API answers", text: answers, evidence: []string{ids[0], ids[1], "c-lab-sec", domains["lab1"], domains["lab2"]}},
		{name: "/metrics", text: secretsGet(t, "http://"+metrics+"/metrics"), evidence: []string{"# TYPE", `zone="lab1"`, `zone="lab2"`}},
	}
	for _, h := range all.Hosts {
		pl := secretsPlace{name: h.Name + " libvirtd.log", file: e.hostFile(h.Name, "var/log/libvirt/libvirtd.log"), from: marks[h.Name]}
		if dom := domains[h.Name]; dom != "" {
			// The hosts this test used logged its domains at debug.
			pl.evidence = []string{" debug : ", dom}
		}
		places = append(places, pl)
		qemuLogs, _ := filepath.Glob(e.hostFile(h.Name, "var/log/libvirt/qemu/*.log"))
		sort.Strings(qemuLogs)
		for _, f := range qemuLogs {
			pl := secretsPlace{name: h.Name + " qemu/" + filepath.Base(f), file: f}
			if dom := domains[h.Name]; dom != "" && filepath.Base(f) == dom+".log" {
				pl.evidence = []string{"-name guest=" + dom}
			}
			places = append(places, pl)
		}
		if dom := domains[h.Name]; dom != "" {
			if _, err := os.Stat(e.hostFile(h.Name, "var/log/libvirt/qemu/"+dom+".log")); err != nil {
				t.Errorf("%s has no QEMU log of %s: %v", h.Name, dom, err)
			}
		}
	}

	var checked int64
	for _, pl := range places {
		size, hits, seen := pl.scan(t, needles)
		for _, ev := range pl.evidence {
			if !seen[ev] {
				t.Errorf("%s (%d bytes) lacks %q: the check would look at nothing", pl.name, size, ev)
			}
		}
		if len(hits) > 0 {
			var whats, funcs []string
			for _, h := range hits {
				whats = append(whats, h.what)
				funcs = append(funcs, h.fn)
			}
			t.Errorf("LEAK in %s (%d bytes): %s\n  logged by: %s\n  e.g.: %s", pl.name, size,
				strings.Join(whats, "; "), strings.Join(secretsUniq(funcs), ", "), hits[0].line)
			continue
		}
		checked += size
		t.Logf("clean: %-58s %10d bytes", pl.name, size)
	}
	t.Logf("%d needles (blob marker raw/hex/base64 in 3 alignments, blob chunk prefixes, %d key lines) in %d places, %d clean bytes",
		len(needles), secretsCount(needles, "key"), len(places), checked)
}

// secretsPlace is text, or a file from an offset on, to search.
type secretsPlace struct {
	name     string
	text     string
	file     string
	from     int64
	evidence []string // each must occur
}

// secretsHit is a needle found, with the line holding it and, for a
// libvirt log line ("... debug : virFunc:123 : ..."), the function.
type secretsHit struct{ what, line, fn string }

// scan searches the place for needles and evidence, a file in 8 MiB
// chunks that overlap by more than any needle. It returns the bytes
// searched, the hits (first per needle) and which evidence occurred.
func (pl secretsPlace) scan(t *testing.T, needles []secretsNeedle) (int64, []secretsHit, map[string]bool) {
	t.Helper()
	var r io.Reader = strings.NewReader(pl.text)
	if pl.file != "" {
		f, err := os.Open(pl.file)
		must(t, err)
		defer f.Close()
		fi, err := f.Stat()
		must(t, err)
		from := pl.from
		if fi.Size() < from {
			from = 0 // truncated or replaced
		}
		_, err = f.Seek(from, io.SeekStart)
		must(t, err)
		r = f
	}
	const chunk, overlap = 8 << 20, 4 << 10
	buf := make([]byte, 0, chunk+overlap)
	var size int64
	var hits []secretsHit
	found := map[string]bool{}
	seen := map[string]bool{}
	for {
		n, err := io.ReadFull(r, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		size += int64(n)
		for _, nd := range needles {
			if found[nd.what] {
				continue
			}
			if i := bytes.Index(buf, []byte(nd.text)); i >= 0 {
				found[nd.what] = true
				line := secretsLine(buf, i)
				hits = append(hits, secretsHit{what: nd.what, line: secretsShort(line), fn: secretsFunc(line)})
			}
		}
		for _, ev := range pl.evidence {
			if !seen[ev] && bytes.Contains(buf, []byte(ev)) {
				seen[ev] = true
			}
		}
		if err != nil { // io.EOF or io.ErrUnexpectedEOF: the end
			break
		}
		keep := buf[len(buf)-overlap:]
		buf = append(buf[:0], keep...)
	}
	return size, hits, seen
}

func secretsLine(buf []byte, i int) string {
	lo := bytes.LastIndexByte(buf[:i], '\n') + 1
	hi := bytes.IndexByte(buf[i:], '\n')
	if hi < 0 {
		hi = len(buf) - i
	}
	return string(buf[lo : i+hi])
}

// secretsFunc is the function of a libvirt log line, or "-".
func secretsFunc(line string) string {
	_, rest, ok := strings.Cut(line, " : ")
	if !ok {
		return "-"
	}
	fn, _, _ := strings.Cut(rest, " : ")
	return fn
}

func secretsShort(s string) string {
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return string(bytes.ToValidUTF8([]byte(s), []byte("?")))
}

func secretsUniq(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// secretsNeedle is one string that must appear nowhere.
type secretsNeedle struct{ what, text string }

// secretsBlob is 64 KiB of random bytes with an ASCII marker at several
// offsets (the start, inside each 48 KiB agent chunk, across none of their
// boundaries, the end) and the forms a leak could take: the marker raw and
// hex; base64 (std and URL) of 48 marker bytes from each of 3 offsets, so
// one of them matches whatever alignment an encoder's 3-byte groups have;
// the std base64 of each chunk's start (as guest-file-write carries it);
// raw random pieces.
func secretsBlob(t *testing.T) ([]byte, []secretsNeedle) {
	t.Helper()
	blob := make([]byte, 64<<10)
	_, err := rand.Read(blob)
	must(t, err)
	r := make([]byte, 16)
	_, err = rand.Read(r)
	must(t, err)
	marker := "BIGFLEET-LAB-SECRET-" + hex.EncodeToString(r)
	// Offsets ≡ 0, 2, 1 (mod 3) in the first 48 KiB chunk and in the
	// second: each base64 alignment below occurs in the agent's encoding.
	for _, off := range []int{0, 1001, 20002, 50003, 50101, len(blob) - len(marker)} {
		copy(blob[off:], marker)
	}
	ns := []secretsNeedle{{"the blob marker", marker}, {"the blob marker (hex)", hex.EncodeToString([]byte(marker))}}
	for k := range 3 {
		part := []byte(marker[k : k+48])
		ns = append(ns,
			secretsNeedle{fmt.Sprintf("the blob marker (base64, offset %d)", k), base64.StdEncoding.EncodeToString(part)},
			secretsNeedle{fmt.Sprintf("the blob marker (base64url, offset %d)", k), base64.RawURLEncoding.EncodeToString(part)})
	}
	for _, off := range []int{0, 48 << 10} {
		ns = append(ns, secretsNeedle{fmt.Sprintf("the blob (base64 from byte %d)", off), base64.StdEncoding.EncodeToString(blob[off : off+48])})
	}
	for _, off := range []int{2000, 40000} {
		ns = append(ns, secretsNeedle{fmt.Sprintf("the blob (raw bytes %d..%d)", off, off+32), string(blob[off : off+32])})
	}
	return blob, ns
}

// secretsKeyLines are the body lines of a PEM or OpenSSH private key file.
func secretsKeyLines(t *testing.T, path, what string) []secretsNeedle {
	t.Helper()
	raw, err := os.ReadFile(path)
	must(t, err)
	var out []secretsNeedle
	for _, l := range strings.Split(string(raw), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "-----") || strings.Contains(l, ":") || len(l) < 20 {
			continue
		}
		out = append(out, secretsNeedle{fmt.Sprintf("a line of the %s (%s)", what, path), l})
	}
	if len(out) < 4 {
		t.Fatalf("%s: only %d key lines", path, len(out))
	}
	return out
}

// secretsAnswers is every read answer of the two APIs about the machines,
// as protobuf bytes and as JSON (bytes fields in base64).
func secretsAnswers(t *testing.T, ctx context.Context, p *labProvider, ids []string) string {
	t.Helper()
	var b strings.Builder
	add := func(what string, m proto.Message) {
		raw, err := proto.Marshal(m)
		must(t, err)
		js, err := protojson.Marshal(m)
		must(t, err)
		fmt.Fprintf(&b, "== %s\n%s\n%s\n", what, raw, js)
	}
	admin := func(method string, req, res proto.Message) {
		if err := p.conn.Invoke(ctx, "/libvirtprovider.admin.v1.AdminService/"+method, req, res); err != nil {
			t.Fatalf("admin %s: %v", method, err)
		}
		add(method, res)
	}
	var l pb.MachineList
	must(t, p.call(ctx, "List", &pb.ListFilter{}, &l))
	add("List", &l)
	for _, id := range ids {
		var m pb.Machine
		must(t, p.call(ctx, "Get", &pb.MachineRef{Id: id}, &m))
		add("Get "+id, &m)
		admin("GetMachine", &adminv1.GetMachineRequest{Id: id}, &adminv1.GetMachineResponse{})
		admin("GetMachineHistory", &adminv1.GetMachineHistoryRequest{Id: id}, &adminv1.GetMachineHistoryResponse{})
	}
	admin("ListMachines", &adminv1.ListMachinesRequest{}, &adminv1.ListMachinesResponse{})
	admin("ListHosts", &adminv1.ListHostsRequest{}, &adminv1.ListHostsResponse{})
	admin("GetFleetSummary", &adminv1.GetFleetSummaryRequest{}, &adminv1.GetFleetSummaryResponse{})
	admin("ListFenceMarks", &adminv1.ListFenceMarksRequest{}, &adminv1.ListFenceMarksResponse{})
	return b.String()
}

func secretsGet(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	must(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	must(t, err)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, res.Status)
	}
	return string(raw)
}

func secretsCount(ns []secretsNeedle, word string) int {
	c := 0
	for _, n := range ns {
		if strings.Contains(n.what, word) {
			c++
		}
	}
	return c
}
