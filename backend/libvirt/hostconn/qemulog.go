package hostconn

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// qemuLogDir is where libvirtd (qemu:///system) keeps each domain's QEMU
// log; tests point it elsewhere.
var qemuLogDir = "/var/log/libvirt/qemu"

// qemuLogTail is how much of a log's end is read for its last error line.
const qemuLogTail = 64 << 10

// ExplainStart adds the last error line of the domain's QEMU log to a
// failed start (or a domain that went off while starting), unless libvirt's own message already carries it: that line
// is usually the real cause ("Could not access KVM kernel module"), and an
// operator should not have to find the log on the host.
func (h *Host) ExplainStart(name string, err error) error {
	if err == nil {
		return nil
	}
	line := h.qemuLogLine(name)
	if line == "" || strings.Contains(err.Error(), line) {
		return err
	}
	return fmt.Errorf("%w (qemu log: %s)", err, line)
}

// qemuLogLine returns the last line of the domain's QEMU log that reports
// an error, redacted, or "" when there is none or the log is not on this
// machine (a remote host's log is not ours to read).
func (h *Host) qemuLogLine(name string) string {
	if !localSystemURI(h.uri) {
		return ""
	}
	f, err := os.Open(filepath.Join(qemuLogDir, filepath.Base(name)+".log"))
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > qemuLogTail {
		_, _ = f.Seek(-qemuLogTail, io.SeekEnd)
	}
	data, err := io.ReadAll(io.LimitReader(f, qemuLogTail))
	if err != nil {
		return ""
	}
	return lastErrorLine(data)
}

// localSystemURI: a qemu:///system URI, whose domains log under qemuLogDir
// on this machine.
func localSystemURI(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	driver, transport, _ := strings.Cut(u.Scheme, "+")
	return driver == "qemu" && (transport == "" || transport == "unix") && u.Host == "" && u.Path == "/system"
}

var (
	errorWords = regexp.MustCompile(`(?i)error|could not|cannot|failed|denied|terminating on signal`)
	// libvirt's own bracketing lines ("starting up", "shutting down,
	// reason=failed") say that QEMU stopped, not why.
	libvirtLines = regexp.MustCompile(`^\d{4}-\d\d-\d\d \S+: (starting up|shutting down)`)
)

// lastErrorLine picks the last line of a QEMU log that reports an error.
func lastErrorLine(data []byte) string {
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(string(lines[i]))
		if l != "" && errorWords.MatchString(l) && !libvirtLines.MatchString(l) {
			return redactSecrets(truncate(l, 400))
		}
	}
	return ""
}

// secretArgs are QEMU option values that may carry a credential: -object
// secret,data=…, password=…, and the like. Socket and file paths stay: an
// operator needs them.
var secretArgs = regexp.MustCompile(`(?i)\b(data|password|passwd|secret|token|key|iv)=[^,\s"']+`)

func redactSecrets(s string) string { return secretArgs.ReplaceAllString(s, "${1}=REDACTED") }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
