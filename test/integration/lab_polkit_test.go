//go:build integration && lab

package integration

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestLabPolkit (check 3): least privilege, enforced by the real polkitd
// of lab2 (libvirt 11.3) and lab4 (9.0) with the shipped rule
// deploy/host-setup/polkit/50-bigfleet-libvirt.rules. virsh runs on this
// machine with exactly the provider's identity (its libssh URI from the
// lab's hosts file: the provider's key, the `bigfleet` account on the host).
// What the provider needs succeeds; everything else is refused with
// libvirt's "access denied", and the polkit action that refused each call
// is read from the host's libvirtd log (the access driver logs every check
// at debug). root on the host (the lab's admin rule) is still allowed what
// bigfleet is refused, so the refusals come from the bigfleet rule, not from
// a broken polkitd.
func TestLabPolkit(t *testing.T) {
	e := loadLab(t)
	all := e.labHosts(t, e.Hosts)
	for _, name := range []string{"lab2", "lab4"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // separate hosts; virsh over libssh takes ~1 s a call on a busy lab
			hosts := all.only(name)
			if len(hosts.Hosts) != 1 || !strings.HasPrefix(hosts.Hosts[0].URI, "qemu+libssh://bigfleet@") {
				t.Fatalf("%s is not a libssh host of the bigfleet account in %s: %+v", name, e.Hosts, hosts)
			}
			polkitHost(t, e, name, hosts.Hosts[0].URI)
		})
	}
}

// polkitRefusal is one call the provider's identity must not make, and the
// polkit action libvirt asks about first when it is made.
type polkitRefusal struct {
	args   []string
	action string
	says   string // virsh's error; "" is libvirt's "access denied"
}

func polkitHost(t *testing.T, e labEnv, host, uri string) {
	pc := &polkitClient{t: t, e: e, host: host, uri: uri, log: e.hostFile(host, "var/log/libvirt/libvirtd.log")}

	// The host runs a real polkitd and the shipped rule (with the lab's
	// pool, image and network: the operator's 3 edits).
	if out := e.lab(t, "exec", host, "pgrep", "-x", "polkitd"); strings.TrimSpace(out) == "" {
		t.Fatalf("no polkitd runs on %s", host)
	}
	polkitSameRule(t, e, host)
	for _, want := range []string{`access_drivers = [ "polkit" ]`} {
		if conf, err := os.ReadFile(e.hostFile(host, "etc/libvirt/libvirtd.conf")); err != nil || !strings.Contains(string(conf), want) {
			t.Fatalf("%s's libvirtd.conf lacks %s (%v)", host, want, err)
		}
	}

	r := polkitRandHex(t)
	dir := t.TempDir()
	boot := "/var/lib/libvirt/bigfleet-boot"
	domXML := func(name string) string {
		return fmt.Sprintf(`<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>`+
			`<os><type arch='x86_64'>hvm</type><kernel>%s/vmlinuz</kernel><initrd>%s/initrd.img</initrd>`+
			`<cmdline>console=ttyS0</cmdline></os></domain>`, name, boot, boot)
	}
	own, evil, victim := "bf-polkit-test-"+r, "evil-"+r, "polkit-victim-"+r
	evilNet, evilPool := "bfpolkitnet"+r, "bfpolkitpool"+r
	ownXML, evilXML, netXML := filepath.Join(dir, "own.xml"), filepath.Join(dir, "evil.xml"), filepath.Join(dir, "net.xml")
	must(t, os.WriteFile(ownXML, []byte(domXML(own)), 0o644))
	must(t, os.WriteFile(evilXML, []byte(domXML(evil)), 0o644))
	must(t, os.WriteFile(netXML, []byte("<network><name>"+evilNet+"</name><bridge name='virbr-x"+r[:6]+"'/></network>"), 0o644))

	// Whatever a wrongly allowed call made, root removes it.
	t.Cleanup(func() {
		script := `v="virsh -q -c qemu:///system"
for d in ` + own + ` ` + evil + ` ` + victim + `; do $v undefine "$d" >/dev/null 2>&1; done
$v net-undefine ` + evilNet + ` >/dev/null 2>&1; $v pool-undefine ` + evilPool + ` >/dev/null 2>&1; true`
		if out, err := exec.Command(e.Script, "exec", host, "sh", "-c", script).CombinedOutput(); err != nil {
			t.Logf("cleanup on %s: %v\n%s", host, err, out)
		}
	})
	// Another workload's domain on the host, defined by root.
	def := exec.Command(e.Script, "exec", host, "virsh", "-q", "-c", "qemu:///system", "define", "/dev/stdin")
	def.Stdin = strings.NewReader(domXML(victim))
	if out, err := def.CombinedOutput(); err != nil {
		t.Fatalf("root define %s on %s: %v\n%s", victim, host, err, out)
	}

	// Allowed: what the provider does.
	for _, args := range [][]string{
		{"version"},
		{"list", "--all", "--name"},
		{"pool-info", "bigfleet"},
		{"net-info", "bigfleet"},
		{"vol-info", "--pool", "bigfleet", "bigfleet-golden.qcow2"},
		{"capabilities"},
		{"define", ownXML},
		{"dominfo", own},
		{"undefine", own},
	} {
		// (list --all is filtered by domain.getattr: the foreign domain's
		// check is denied, the call succeeds.)
		out, denied := pc.run(args...)
		if out.err != nil {
			t.Errorf("ALLOWED call refused: virsh %s: %v (denied %v)\n%s", strings.Join(args, " "), out.err, denied, out.text)
			continue
		}
		t.Logf("ALLOWED %s%s", strings.ReplaceAll(strings.Join(args, " "), dir+"/", ""), polkitFiltered(denied))
	}
	if out, _ := pc.run("list", "--all", "--name"); strings.Contains(out.text, victim) {
		t.Errorf("bigfleet sees the foreign domain %s in list --all:\n%s", victim, out.text)
	}

	// Refused: everything else, including the provider's pool, image and
	// network where it only needs to look them up.
	refused := []polkitRefusal{
		{[]string{"nodedev-list"}, "org.libvirt.api.connect.search-node-devices", ""},
		{[]string{"net-define", netXML}, "org.libvirt.api.network.write", ""},
		{[]string{"define", evilXML}, "org.libvirt.api.domain.write", ""},
		// virsh looks the domain up by id, uuid, then name, and reports only
		// that it found none; the log shows the refused lookup.
		{[]string{"undefine", victim}, "org.libvirt.api.domain.getattr", "failed to get domain"},
		{[]string{"pool-define-as", evilPool, "dir", "--target", "/var/lib/libvirt/" + evilPool}, "org.libvirt.api.storage-pool.write", ""},
		{[]string{"secret-list"}, "org.libvirt.api.connect.search-secrets", ""},
		{[]string{"nwfilter-list"}, "org.libvirt.api.connect.search-nwfilters", ""},
		{[]string{"net-list", "--all"}, "org.libvirt.api.connect.search-networks", ""},
		{[]string{"pool-list", "--all"}, "org.libvirt.api.connect.search-storage-pools", ""},
		{[]string{"vol-list", "bigfleet"}, "org.libvirt.api.storage-pool.search-storage-vols", ""},
		{[]string{"vol-download", "--pool", "bigfleet", "bigfleet-golden.qcow2", filepath.Join(dir, "golden.out")}, "org.libvirt.api.storage-vol.data-read", ""},
		{[]string{"domcapabilities"}, "org.libvirt.api.connect.write", ""},
	}
	var table []string
	for _, c := range refused {
		cmd := strings.Join(c.args, " ")
		out, denied := pc.run(c.args...)
		switch {
		case out.err == nil:
			t.Errorf("REFUSED call succeeded on %s: virsh %s\n%s", host, cmd, out.text)
			continue
		case !strings.Contains(out.text, cmp.Or(c.says, "access denied")):
			t.Errorf("virsh %s on %s failed without libvirt's access denied: %v\n%s", cmd, host, out.err, out.text)
			continue
		case len(denied) != 1:
			t.Errorf("virsh %s on %s: want exactly one denied polkit check in %s's libvirtd log, got %v", cmd, host, host, denied)
			continue
		}
		line := fmt.Sprintf("REFUSED %-50s -> %s", strings.ReplaceAll(cmd, dir+"/", ""), denied[0])
		table = append(table, line)
		if denied[0] != c.action {
			t.Errorf("virsh %s on %s was refused by %s, want %s", cmd, host, denied[0], c.action)
		}
	}
	t.Logf("%s (libvirt %s), identity bigfleet over libssh, refusals by polkitd:\n%s",
		host, polkitDaemonVersion(t, e, host), strings.Join(table, "\n"))
	if len(table) < 6 {
		t.Errorf("only %d refusals recorded on %s", len(table), host)
	}

	if out := labVirsh(t, e, host, "list", "--all", "--name"); !strings.Contains(out, victim) {
		t.Errorf("the foreign domain %s is gone from %s after bigfleet's refused undefine", victim, host)
	}

	// root through the same polkitd: the lab's admin rule allows it, so the
	// refusals above are the bigfleet rule's answers.
	mark := labLogMark(pc.log)
	if out, err := exec.Command(e.Script, "exec", host, "virsh", "-q", "-c", "qemu:///system", "nodedev-list").CombinedOutput(); err != nil {
		t.Errorf("root nodedev-list on %s: %v\n%s", host, err, out)
	}
	var rootOK bool
	waitUntil(t, 5*time.Second, "root's nodedev-list check in "+host+"'s libvirtd log", func() bool {
		for _, c := range polkitChecks(labLogSince(t, pc.log, mark)) {
			if c.uid == "0" && c.action == "org.libvirt.api.connect.search-node-devices" {
				rootOK = c.allowed
				return true
			}
		}
		return false
	})
	if !rootOK {
		t.Errorf("polkitd refused root's connect.search-node-devices on %s", host)
	} else {
		t.Logf("ALLOWED for root on %s: nodedev-list (org.libvirt.api.connect.search-node-devices, polkitd said yes)", host)
	}
}

// polkitClient runs virsh as the provider's identity against one host.
type polkitClient struct {
	t    *testing.T
	e    labEnv
	host string
	uri  string
	log  string
}

type virshOut struct {
	text string
	err  error
}

// run runs virsh with the provider's URI and returns its output and the
// polkit actions denied to that virsh's connection (nil: none), read from
// the host's libvirtd log. The connection is the host-side process (its
// virt-ssh-helper, uid 65532) that started during the call: libvirt logs
// each check with the caller's pid and start time (clock ticks since
// boot, one kernel for the lab), which tells it from the long-lived
// connections of providers running meanwhile.
func (pc *polkitClient) run(args ...string) (virshOut, []string) {
	t := pc.t
	t.Helper()
	mark := labLogMark(pc.log)
	t0 := polkitTicks(t) - 10
	cmd := exec.Command("virsh", append([]string{"-q", "-c", pc.uri}, args...)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	t1 := polkitTicks(t) + 10
	out := virshOut{text: buf.String(), err: err}
	deadline := time.Now().Add(3 * time.Second)
	for {
		byPID := map[string][]string{}
		for _, c := range polkitChecks(labLogSince(t, pc.log, mark)) {
			if c.uid == "65532" && c.start >= t0 && c.start <= t1 && !c.allowed {
				byPID[c.pid] = append(byPID[c.pid], c.action)
			}
		}
		if len(byPID) > 1 {
			t.Fatalf("virsh %s: denials of %d processes started during the call in %s's log: %v", strings.Join(args, " "), len(byPID), pc.host, byPID)
		}
		var denied []string
		for _, d := range byPID {
			denied = d
		}
		// A refused call's denial is logged before virsh gets its error.
		if err == nil || len(denied) > 0 || time.Now().After(deadline) {
			return out, denied
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// polkitTicks is the machine's uptime in clock ticks (USER_HZ, 100).
func polkitTicks(t *testing.T) int64 {
	t.Helper()
	raw, err := os.ReadFile("/proc/uptime")
	must(t, err)
	var up float64
	_, err = fmt.Sscan(string(raw), &up)
	must(t, err)
	return int64(up * 100)
}

// polkitCheck is one access check of libvirtd's polkit driver.
type polkitCheck struct {
	action, pid, uid string
	start            int64 // the caller's start time, ticks since boot
	allowed          bool
}

var (
	// 2026-12-04 08:53:14.351+0000: 93: debug : virAccessDriverPolkitCheck:135 : Check action 'org.libvirt.api.x.y' for process '1542' time 188024 uid 65532
	polkitCheckRE = regexp.MustCompile(`^\S+ \S+ (\d+): debug : virAccessDriverPolkitCheck:\d+ : Check action '([^']+)' for process '(\d+)' time (\d+) uid (\d+)`)
	// ... 91: debug : virPolkitCheckAuth:129 : is auth 0  is challenge 0
	polkitAuthRE = regexp.MustCompile(`^\S+ \S+ (\d+): debug : virPolkitCheckAuth:\d+ : is auth (\d+)`)
)

// polkitChecks pairs each "Check action" line with the answer logged next
// on the same daemon thread.
func polkitChecks(log string) []polkitCheck {
	pending := map[string]polkitCheck{}
	var out []polkitCheck
	for _, line := range strings.Split(log, "\n") {
		if m := polkitCheckRE.FindStringSubmatch(line); m != nil {
			var start int64
			_, _ = fmt.Sscan(m[4], &start)
			pending[m[1]] = polkitCheck{action: m[2], pid: m[3], start: start, uid: m[5]}
			continue
		}
		if m := polkitAuthRE.FindStringSubmatch(line); m != nil {
			c, ok := pending[m[1]]
			if !ok {
				continue
			}
			delete(pending, m[1])
			c.allowed = m[2] == "1"
			out = append(out, c)
		}
	}
	return out
}

// polkitSameRule checks the host's installed rule is the shipped one with
// only the settings lines (POOLS, IMAGES, NETWORKS) edited.
func polkitSameRule(t *testing.T, e labEnv, host string) {
	t.Helper()
	shipped, err := os.ReadFile(filepath.Join(filepath.Dir(e.Script), "..", "deploy", "host-setup", "polkit", "50-bigfleet-libvirt.rules"))
	must(t, err)
	installed, err := os.ReadFile(e.hostFile(host, "etc/polkit-1/rules.d/50-bigfleet-libvirt.rules"))
	must(t, err)
	strip := func(b []byte) (body string, settings []string) {
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "var POOLS = ") || strings.HasPrefix(l, "var IMAGES = ") || strings.HasPrefix(l, "var NETWORKS = ") {
				settings = append(settings, l)
				continue
			}
			keep = append(keep, l)
		}
		sort.Strings(settings)
		return strings.Join(keep, "\n"), settings
	}
	a, _ := strip(shipped)
	b, settings := strip(installed)
	if a != b {
		t.Fatalf("%s's /etc/polkit-1/rules.d/50-bigfleet-libvirt.rules is not the shipped rule (beyond its settings)", host)
	}
	t.Logf("%s runs the shipped rule with %s", host, strings.Join(settings, " "))
}

func polkitDaemonVersion(t *testing.T, e labEnv, host string) string {
	t.Helper()
	out := e.lab(t, "exec", host, "virsh", "-q", "-c", "qemu:///system", "version", "--daemon")
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Running against daemon:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func polkitFiltered(denied []string) string {
	if len(denied) == 0 {
		return ""
	}
	return " (filtered out: " + strings.Join(denied, ", ") + ")"
}

func polkitRandHex(t *testing.T) string {
	t.Helper()
	return identityRand(t)
}
