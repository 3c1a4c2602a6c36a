//go:build soaklab

package soaklab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/bigfleet/libvirt-provider/internal/labenv"
)

// labEnv is /run/bigfleet-lab/env (scripts/lab.sh up), typed.
type labEnv struct{ labenv.Env }

func loadLab() (labEnv, error) {
	e, err := labenv.Load()
	return labEnv{e}, err
}

// labHost is one entry of a --hosts file (JSON is YAML).
type labHost struct {
	Name   string            `json:"name"`
	Zone   string            `json:"zone"`
	URI    string            `json:"uri"`
	Labels map[string]string `json:"labels,omitempty"`
}

// zones is the soak's layout: two zones of two hosts, each zone holding
// libvirt 9.0 and 11.3: za is lab1 (9.0) and lab3 (11.3) over qemu+tls,
// zb is lab4 (9.0) and lab2 (11.3) over qemu+libssh. Live migrations run
// in both (deploy/host-setup's polkit rule grants domain.migrate on the
// provider's domains); a machine defined on 11.3 (pc-i440fx-10.0) is
// refused the 9.0 host before any work, which exercises a refused
// migration: the VM stays where it was, never FAILED.
var zones = map[string]string{"lab1": "za", "lab3": "za", "lab2": "zb", "lab4": "zb"}

// soakHosts reads the lab's per-host entries and puts them in the soak's
// zones; it refuses a lab without lab1..lab4.
func (e labEnv) soakHosts() ([]labHost, error) {
	raw, err := os.ReadFile(e.Hosts)
	if err != nil {
		return nil, err
	}
	// The lab writes YAML in a fixed shape: name, zone, uri, labels.
	var out []labHost
	var cur *labHost
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "- name: "):
			out = append(out, labHost{Name: strings.TrimPrefix(line, "- name: ")})
			cur = &out[len(out)-1]
		case cur != nil && strings.HasPrefix(line, "uri: "):
			cur.URI = strings.Trim(strings.TrimPrefix(line, "uri: "), `"`)
		case cur != nil && strings.HasPrefix(line, "labels: "):
			cur.Labels = map[string]string{}
			for _, kv := range strings.Split(strings.Trim(strings.TrimPrefix(line, "labels: "), "{}"), ",") {
				k, v, _ := strings.Cut(kv, ":")
				cur.Labels[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
			}
		}
	}
	var hosts []labHost
	for _, h := range out {
		if z, ok := zones[h.Name]; ok {
			h.Zone = z
			hosts = append(hosts, h)
		}
	}
	if len(hosts) != len(zones) {
		return nil, fmt.Errorf("%s holds %d of the hosts lab1..lab4: run scripts/lab.sh up 4", e.Hosts, len(hosts))
	}
	return hosts, nil
}

func writeJSON(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// run runs scripts/lab.sh with args, bounded (a reboot waits for the
// host's libvirtd, up to 60 s).
func (e labEnv) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, e.Script, args...).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("lab.sh %s: %w: %s", strings.Join(args, " "), err, s)
	}
	return s, nil
}

// virsh runs virsh as root inside the host (its namespaces: no network
// fault of the host's eth0 is in the way); a frozen daemon must not hang
// the soak.
func (e labEnv) virsh(host string, args ...string) (string, error) {
	return e.run(30*time.Second, append([]string{"exec", host, "virsh", "-q", "-c", "qemu:///system"}, args...)...)
}

// listing is what one host holds of the soak's provider: its domains with
// their state, and its volumes.
type listing struct {
	doms map[string]string
	vols []string
}

// list reads the host's domains and the pool's volumes of prefix.
func (e labEnv) list(host, prefix string) (listing, error) {
	l := listing{doms: map[string]string{}}
	out, err := e.virsh(host, "list", "--all")
	if err != nil {
		return l, err
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && strings.HasPrefix(f[1], prefix) {
			l.doms[f[1]] = strings.Join(f[2:], " ")
		}
	}
	out, err = e.virsh(host, "vol-list", "bigfleet")
	if err != nil {
		return l, err
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			l.vols = append(l.vols, f[0])
		}
	}
	return l, nil
}

// sweep removes every domain and volume of prefix on the host, whatever
// made it (an earlier run, or this one's teardown after a violation).
func (e labEnv) sweep(host, prefix string) {
	script := `v="virsh -q -c qemu:///system"; p="^` + prefix + `"
for d in $($v list --all --name | grep "$p"); do $v destroy "$d" >/dev/null 2>&1; $v undefine "$d" >/dev/null 2>&1; done
for x in $($v vol-list bigfleet | awk '{print $1}' | grep "$p"); do $v vol-delete --pool bigfleet "$x" >/dev/null 2>&1; done; true`
	_, _ = e.run(2*time.Minute, "exec", host, "sh", "-c", script)
}
