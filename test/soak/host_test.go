//go:build soak

package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// env is what scripts/libvirt-env.sh up wrote.
type env struct {
	URI, Pool, Image, Network, Kernel, Initrd, Cmdline, DomainType string
}

const envFile = "/run/bigfleet-libvirt-env/env"

func loadEnv() (env, error) {
	path := os.Getenv("BIGFLEET_LIBVIRT_ENV")
	if path == "" {
		path = envFile
	}
	f, err := os.Open(path)
	if err != nil {
		return env{}, fmt.Errorf("%s: %w (run scripts/libvirt-env.sh up, or make soak)", path, err)
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export "), "=")
		if ok {
			kv[k] = strings.Trim(v, `'"`)
		}
	}
	e := env{URI: kv["BIGFLEET_LIBVIRT_URI"], Pool: kv["BIGFLEET_POOL"], Image: kv["BIGFLEET_IMAGE"],
		Network: kv["BIGFLEET_NETWORK"], Kernel: kv["BIGFLEET_KERNEL"], Initrd: kv["BIGFLEET_INITRD"],
		Cmdline: kv["BIGFLEET_CMDLINE"], DomainType: kv["BIGFLEET_DOMAIN_TYPE"]}
	if e.URI == "" || e.Pool == "" || e.Image == "" || e.Kernel == "" {
		return e, fmt.Errorf("%s lacks BIGFLEET_LIBVIRT_URI/POOL/IMAGE/KERNEL", path)
	}
	return e, sc.Err()
}

// host is the soak's own view of libvirt, through virsh: nothing the
// provider says is trusted for the orphan checks.
type host struct {
	env
	prefix string // bf-<provider>-
	log    func(format string, args ...any)
}

// virsh runs one virsh command; a frozen daemon must not hang the soak.
func (h *host) virsh(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "virsh", append([]string{"-q", "-c", h.URI}, args...)...).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("virsh %s: %w: %s", strings.Join(args, " "), err, s)
	}
	return s, nil
}

// domains maps each of our domains to its state ("running", "shut off").
func (h *host) domains() (map[string]string, error) {
	out, err := h.virsh(30*time.Second, "list", "--all")
	if err != nil {
		return nil, err
	}
	doms := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && strings.HasPrefix(f[1], h.prefix) {
			doms[f[1]] = strings.Join(f[2:], " ")
		}
	}
	return doms, nil
}

// volumes lists our volumes in the pool.
func (h *host) volumes() ([]string, error) {
	out, err := h.virsh(30*time.Second, "vol-list", h.Pool)
	if err != nil {
		return nil, err
	}
	var vols []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], h.prefix) {
			vols = append(vols, f[0])
		}
	}
	return vols, nil
}

// sweep removes every domain and volume of our prefix, whatever made it.
func (h *host) sweep() (removed []string) {
	doms, _ := h.domains()
	for d := range doms {
		_, _ = h.virsh(60*time.Second, "destroy", d)
		if _, err := h.virsh(60*time.Second, "undefine", d, "--nvram"); err == nil {
			removed = append(removed, d)
		}
	}
	vols, _ := h.volumes()
	for _, v := range vols {
		if _, err := h.virsh(60*time.Second, "vol-delete", "--pool", h.Pool, v); err == nil {
			removed = append(removed, v)
		}
	}
	return removed
}

// ---- libvirtd ----------------------------------------------------------

const (
	libvirtdPidFile = "/run/libvirtd.pid"
	// libvirt-env.sh's record of the daemon it started: a restart by the
	// soak replaces that daemon, so the record follows (down stops it).
	libvirtdStarted = "/run/bigfleet-libvirt-env/libvirtd.started"
)

// libvirtdPid is the running daemon's pid, checked against /proc so a stale
// pid file never makes the soak signal another process.
func libvirtdPid() (int, error) {
	b, err := os.ReadFile(libvirtdPidFile)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", libvirtdPidFile, err)
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "libvirtd" {
		return 0, fmt.Errorf("pid %d from %s is not libvirtd", pid, libvirtdPidFile)
	}
	return pid, nil
}

func (h *host) answers() bool {
	_, err := h.virsh(10*time.Second, "version")
	return err == nil
}

// waitAnswer polls `virsh version` until the daemon answers.
func (h *host) waitAnswer(within time.Duration) error {
	deadline := time.Now().Add(within)
	for !h.answers() {
		if time.Now().After(deadline) {
			return fmt.Errorf("libvirtd does not answer on %s after %s", h.URI, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// killLibvirtd SIGKILLs the daemon and waits for it to be gone. QEMU
// processes and virtlogd survive it, as they would a crash.
func (h *host) killLibvirtd() (int, error) {
	pid, err := libvirtdPid()
	if err != nil {
		return 0, err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return pid, err
	}
	for i := 0; i < 100; i++ {
		if syscall.Kill(pid, 0) != nil {
			return pid, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return pid, fmt.Errorf("libvirtd %d survived SIGKILL for 5s", pid)
}

// startLibvirtd starts the daemon the way scripts/libvirt-env.sh does and
// waits until it answers. oldPid (0: none) is the daemon it replaces.
func (h *host) startLibvirtd(oldPid int) error {
	cmd := exec.Command("libvirtd", "-d", "-p", libvirtdPidFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil { // -d: returns once the daemon forked
		return fmt.Errorf("libvirtd -d: %w", err)
	}
	if err := h.waitAnswer(90 * time.Second); err != nil {
		return err
	}
	pid, err := libvirtdPid()
	if err != nil {
		return err
	}
	if b, err := os.ReadFile(libvirtdStarted); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(oldPid) {
		_ = os.WriteFile(libvirtdStarted, []byte(strconv.Itoa(pid)+"\n"), 0o644)
	}
	return nil
}

// freeze SIGSTOPs libvirtd for d, then SIGCONTs it, whatever happens.
func (h *host) freeze(d time.Duration) error {
	pid, err := libvirtdPid()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	time.Sleep(d)
	return nil
}

// ensureLibvirtd leaves the daemon running and answering: thawed if a
// freeze was cut short, restarted if a kill was. Used at the start and end.
func (h *host) ensureLibvirtd() error {
	if pid, err := libvirtdPid(); err == nil {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		return h.waitAnswer(90 * time.Second)
	}
	if h.answers() {
		return nil // a daemon we did not start and cannot see: leave it
	}
	h.log("libvirtd is not running: starting it")
	return h.startLibvirtd(0)
}

// preflight refuses a host where libvirtd answers slowly: with /dev/kvm
// root-only (no kvm group) libvirt re-probes QEMU on every call, `virsh
// version` takes seconds, and every fault would read as a provider failure.
func (h *host) preflight() error {
	t0 := time.Now()
	if _, err := h.virsh(60*time.Second, "version"); err != nil {
		return err
	}
	if took := time.Since(t0); took > 3*time.Second {
		return fmt.Errorf("libvirtd needs %s to answer `virsh version` (a healthy host: under 0.5 s); "+
			"is /dev/kvm root-only? scripts/libvirt-env.sh up prepares the host (make soak-short runs it)", took.Round(100*time.Millisecond))
	}
	return nil
}

// ---- guest agent ---------------------------------------------------------

type agentCmd struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
}

type guestExec struct {
	Path string   `json:"path"`
	Arg  []string `json:"arg,omitempty"`
}

// agent sends one command to a guest's qemu-ga through libvirt.
func (h *host) agent(domain string, cmd agentCmd, timeout time.Duration) (string, error) {
	b, err := json.Marshal(cmd)
	if err != nil {
		return "", err
	}
	secs := strconv.Itoa(max(1, int(timeout/time.Second)))
	return h.virsh(timeout+10*time.Second, "qemu-agent-command", domain, "--timeout", secs, string(b))
}

// guestShell starts a busybox sh script in the guest and does not wait for
// it (the script may stop or kill the agent that started it).
func (h *host) guestShell(domain, script string) error {
	_, err := h.agent(domain, agentCmd{Execute: "guest-exec",
		Arguments: guestExec{Path: "/bin/sh", Arg: []string{"-c", script}}}, 10*time.Second)
	return err
}

func (h *host) agentPing(domain string) error {
	_, err := h.agent(domain, agentCmd{Execute: "guest-ping"}, 5*time.Second)
	return err
}

var errNoAgent = errors.New("guest agent not answering")
