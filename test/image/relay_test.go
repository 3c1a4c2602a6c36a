//go:build image

package image

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// socketRelay stands in for a libvirt host configured for the chart's
// socket mode (unix_sock_group = the pod's supplemental group,
// auth_unix_rw = "none": the socket's mode is the access control). This
// machine's libvirtd keeps Debian's default, polkit for the read-write
// socket, which needs a system D-Bus it does not have, so a client that is
// not root is refused. The relay is a socket owned by root:gid, mode 0660,
// whose connections it forwards to libvirtd's socket as root: a process
// can use it only if it holds gid, exactly what the chart's
// supplementalGroups must give the container.
type socketRelay struct {
	path  string
	l     net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
}

func startRelay(t *testing.T, target string, gid int) *socketRelay {
	t.Helper()
	dir, err := os.MkdirTemp("", "bf-image-sock-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &socketRelay{path: filepath.Join(dir, "libvirt-sock")}
	if r.l, err = net.Listen("unix", r.path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(r.path, 0, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(r.path, 0o660); err != nil {
		t.Fatal(err)
	}
	r.wg.Add(1)
	go r.serve(target)
	t.Cleanup(func() {
		r.l.Close()
		r.wg.Wait()
		os.RemoveAll(dir)
	})
	return r
}

func (r *socketRelay) serve(target string) {
	defer r.wg.Done()
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		r.conns.Add(1)
		go func() {
			defer c.Close()
			up, err := net.Dial("unix", target)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { io.Copy(up, c); done <- struct{}{} }()
			go func() { io.Copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}
