package soakkit

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is bin/libvirt, restarted on the same flags (so the same --state and
// --addr) as often as the faults say. The output of every run goes to one
// log file.
type Proc struct {
	Bin     string
	Args    []string
	Env     []string // added to the soak's environment
	LogPath string
	// Ready answers nil once the provider serves (a List through the
	// soak's connection).
	Ready func() error

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	starts []time.Time
}

// Start runs the binary and waits until Ready answers.
func (pr *Proc) Start() error {
	logf, err := os.OpenFile(pr.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "==== soak: start %s\n", time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(pr.Bin, pr.Args...)
	cmd.Env = append(os.Environ(), pr.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	logf.Close() // the child has its own copy
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	pr.mu.Lock()
	pr.cmd, pr.done = cmd, done
	pr.starts = append(pr.starts, time.Now())
	pr.mu.Unlock()
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := pr.Ready()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("provider exited at startup (%s); log tail:\n%s", cmd.ProcessState, pr.Tail(20, ""))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("provider not serving after 90s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Running is the current process and the channel closed when it exits.
func (pr *Proc) Running() (*exec.Cmd, chan struct{}) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.cmd, pr.done
}

// Exited says whether the last started process has exited.
func (pr *Proc) Exited() bool {
	_, done := pr.Running()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Kill SIGKILLs the provider and waits for the process to be gone.
func (pr *Proc) Kill() {
	cmd, done := pr.Running()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Term sends SIGTERM and waits for the exit (SIGKILL after limit). It
// returns how long the exit took and whether the process exited by itself.
func (pr *Proc) Term(limit time.Duration) (time.Duration, bool) {
	cmd, done := pr.Running()
	if cmd == nil {
		return 0, true
	}
	t0 := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return time.Since(t0), true
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		return time.Since(t0), false
	}
}

// LastStart is when the running provider was started.
func (pr *Proc) LastStart() time.Time {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if len(pr.starts) == 0 {
		return time.Time{}
	}
	return pr.starts[len(pr.starts)-1]
}

// Tail returns the last n lines of the provider's log, only those that
// mention grep when it is not empty.
func (pr *Proc) Tail(n int, grep string) string {
	b, err := os.ReadFile(pr.LogPath)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n")) {
		if grep == "" || bytes.Contains(l, []byte(grep)) {
			lines = append(lines, string(l))
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    | " + strings.Join(lines, "\n    | ")
}

// CopyFile copies a binary: a soak runs a private copy of bin/libvirt,
// which someone else may rebuild while it restarts the provider a hundred
// times.
func CopyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}
