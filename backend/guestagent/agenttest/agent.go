// Package agenttest is a fake qemu guest agent for tests of the code that
// drives one (backend/libvirt and its guest package): it speaks the
// protocol guestagent.Client sends and plays the image contract's hooks.
package agenttest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/guestagent"
)

var _ guestagent.Transport = (*Agent)(nil)

// Agent answers like qemu-ga running the image contract's hooks: the
// bootstrap exits 3 for cluster "exit3", drain succeeds, there is no ready
// hook. It keeps the guest's files in memory. Hold Mu to read Files,
// Cluster or Calls while calls may run.
type Agent struct {
	Mu      sync.Mutex
	Files   map[string][]byte // the guest's files by path
	Cluster string            // the cluster the last successful bootstrap hook saw
	Calls   int               // commands answered
	open    map[int64]string
	next    int64
	exits   map[int64]int
}

// New returns an agent whose guest has the bootstrap and drain hooks.
func New() *Agent {
	return &Agent{Files: map[string][]byte{"/opt/bigfleet/bootstrap": nil, "/opt/bigfleet/drain": nil},
		open: map[int64]string{}, exits: map[int64]int{}}
}

// Command is guestagent.Transport.
func (a *Agent) Command(_ context.Context, req []byte, _ time.Duration) ([]byte, error) {
	var r struct {
		Execute   string          `json:"execute"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(req, &r); err != nil {
		return nil, err
	}
	var args struct {
		Path, Mode  string
		Handle, PID int64
		Arg         []string
		Buf         string `json:"buf-b64"`
		ID          int64
	}
	_ = json.Unmarshal(r.Arguments, &args)
	a.Mu.Lock()
	defer a.Mu.Unlock()
	a.Calls++
	ret := func(v any) ([]byte, error) { return json.Marshal(map[string]any{"return": v}) }
	switch r.Execute {
	case "guest-ping":
		return ret(map[string]any{})
	case "guest-sync":
		return ret(args.ID)
	case "guest-file-open":
		if _, ok := a.Files[args.Path]; !ok && args.Mode == "r" {
			return nil, &guestagent.AgentError{Desc: "Failed to open file '" + args.Path + "': No such file or directory"}
		}
		a.next++
		a.open[a.next] = args.Path
		if args.Mode == "w" {
			a.Files[args.Path] = nil
		}
		return ret(a.next)
	case "guest-file-write":
		b, _ := base64.StdEncoding.DecodeString(args.Buf)
		p := a.open[args.Handle]
		a.Files[p] = append(a.Files[p], b...)
		return ret(map[string]any{"count": len(b), "eof": false})
	case "guest-file-close":
		delete(a.open, args.Handle)
		return ret(map[string]any{})
	case "guest-exec":
		a.next++
		code := 0
		if args.Path == "/bin/sh" {
			a.script(args.Arg)
			a.exits[a.next] = 0
			return ret(map[string]any{"pid": a.next})
		}
		if args.Path == "/usr/bin/setsid" && len(args.Arg) > 8 && args.Arg[3] == "bigfleet-traced" {
			// The traced wrapper (sh -c script $0 dir name trace op hook args...).
			args.Path, args.Arg = args.Arg[8], args.Arg[9:]
		} else if args.Path == "/usr/bin/setsid" && len(args.Arg) > 6 {
			// The pid-recording wrapper (sh -c script $0 dir name hook args...).
			args.Path, args.Arg = args.Arg[6], args.Arg[7:]
		}
		if args.Path == "/opt/bigfleet/bootstrap" {
			// The cluster id is the value after "--" (argv ends options).
			cluster := ""
			if i := slices.Index(args.Arg, "--"); i >= 0 && i+1 < len(args.Arg) {
				cluster = args.Arg[i+1]
			}
			if cluster == "exit3" {
				code = 3
			} else {
				a.Cluster = cluster
			}
		}
		if _, ok := a.Files[args.Path]; !ok {
			return nil, &guestagent.AgentError{Desc: "Failed to execute child process: No such file or directory"}
		}
		a.exits[a.next] = code
		return ret(map[string]any{"pid": a.next})
	case "guest-exec-status":
		code := a.exits[args.PID]
		st := map[string]any{"exited": true, "exitcode": code}
		if code != 0 {
			st["err-data"] = base64.StdEncoding.EncodeToString([]byte("bootstrap failed on purpose"))
		}
		return ret(st)
	}
	return nil, &guestagent.AgentError{Class: "CommandNotFound", Desc: r.Execute}
}

// script plays guestagent's bookkeeping scripts ("-c", script, $0, args):
// the tidy that creates the empty blob file, the rename into place; the
// rest (reaping, group kills) has nothing to act on here.
func (a *Agent) script(arg []string) {
	if len(arg) < 3 {
		return
	}
	switch v := arg[3:]; arg[2] {
	case "bigfleet-tidy":
		for p := range a.Files {
			if strings.HasPrefix(p, v[1]+"/") {
				delete(a.Files, p)
			}
		}
		if v[2] != "" {
			a.Files[v[1]+"/"+v[2]] = nil
		}
	case "bigfleet-blob":
		a.Files[v[2]] = a.Files[v[0]+"/"+v[1]]
		delete(a.Files, v[0]+"/"+v[1])
	}
}
