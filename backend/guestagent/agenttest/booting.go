package agenttest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/backend/guestagent"
)

var _ guestagent.Transport = (*Booting)(nil)

// Booting is a qemu-ga whose image has the booted hook: run n (from 1)
// ends as Exits(n) says, with its stdout. Everything else is absent, or
// answered by Rest. Hold Mu to read Runs and Events while calls may run.
type Booting struct {
	Mu    sync.Mutex
	Runs  int                       // booted hook runs so far
	Exits func(n int) (int, string) // exit code and stdout of run n
	OnRun func(n int)               // called (unlocked) as run n starts
	// Rest, if set, answers every other command (the bootstrap's), and
	// Events records the order: "booted:<exit>" per hook run, "exec <path>"
	// per command Rest runs.
	Rest   guestagent.Transport
	Events []string
	next   int64
	procs  map[int64][2]string // pid -> exit code, stdout
}

// bootPIDBase keeps the hook's pids apart from rest's.
const bootPIDBase = 1 << 20

// Command is guestagent.Transport.
func (a *Booting) Command(_ context.Context, req []byte, _ time.Duration) ([]byte, error) {
	var r struct {
		Execute   string `json:"execute"`
		Arguments struct {
			Path string `json:"path"`
			PID  int64  `json:"pid"`
		} `json:"arguments"`
	}
	if err := json.Unmarshal(req, &r); err != nil {
		return nil, err
	}
	ret := func(v any) ([]byte, error) { return json.Marshal(map[string]any{"return": v}) }
	mine := r.Execute == "guest-exec" && r.Arguments.Path == guestagent.DefaultBootedHook ||
		r.Execute == "guest-exec-status" && r.Arguments.PID > bootPIDBase || r.Execute == "guest-ping"
	if !mine && a.Rest != nil {
		if r.Execute == "guest-exec" {
			a.Mu.Lock()
			a.Events = append(a.Events, "exec "+r.Arguments.Path)
			a.Mu.Unlock()
		}
		return a.Rest.Command(context.Background(), req, 0)
	}
	switch r.Execute {
	case "guest-ping":
		return ret(map[string]any{})
	case "guest-exec":
		if r.Arguments.Path != guestagent.DefaultBootedHook {
			return nil, &guestagent.AgentError{Desc: "Failed to execute child process (No such file or directory)"}
		}
		a.Mu.Lock()
		a.Runs++
		n := a.Runs
		a.next++
		pid := bootPIDBase + a.next
		code, out := a.Exits(n)
		if a.procs == nil {
			a.procs = map[int64][2]string{}
		}
		a.procs[pid] = [2]string{strconv.Itoa(code), out}
		a.Events = append(a.Events, "booted:"+strconv.Itoa(code))
		a.Mu.Unlock()
		if a.OnRun != nil {
			a.OnRun(n)
		}
		return ret(map[string]any{"pid": pid})
	case "guest-exec-status":
		a.Mu.Lock()
		defer a.Mu.Unlock()
		p := a.procs[r.Arguments.PID]
		return []byte(`{"return":{"exited":true,"exitcode":` + p[0] + `,"out-data":"` +
			base64.StdEncoding.EncodeToString([]byte(p[1])) + `"}}`), nil
	}
	return nil, &guestagent.AgentError{Class: "CommandNotFound", Desc: r.Execute}
}
