package guestagent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// proc is the script of one guest process: it reports running for Polls
// status calls, then exits with Exit (or dies by Signal). Hang never ends.
type proc struct {
	Polls          int
	Exit           int
	Signal         int // non-zero: killed by this signal
	Hang           bool
	Stdout, Stderr string
}

// program decides how the n-th run (from 1) of a path with args behaves.
type program func(args []string, n int) proc

type running struct {
	p      proc
	polls  int
	killed bool
	// trace and op: a hook run under tracedWrapScript, whose exit is
	// written to the trace (a killed one leaves "started").
	trace, op string
}

type execCall struct {
	Path string
	Args []string
}

type rawReq struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
}

// fakeGuest is a scripted qemu-ga: it decodes each request and answers from
// its files and program scripts. Override, if set, may answer first.
type fakeGuest struct {
	t        testing.TB
	mu       sync.Mutex
	files    map[string][]byte
	handles  map[int64]string
	programs map[string]program
	runs     map[string]int
	procs    map[int64]*running
	next     int64
	execs    []execCall
	writes   []int // raw bytes per guest-file-write
	closed   int
	reqs     []string // command names in order
	timeouts []time.Duration
	override func(cmd string, args json.RawMessage) ([]byte, error, bool)

	// The guest-side bookkeeping (guestside.go), played by the fake.
	modes      map[string]uint32 // file modes; qemu-ga creates files 0666
	scripts    []string          // $0 of each bookkeeping script run, in order
	scriptFail map[string]proc   // $0 -> how that script ends instead of 0
	reaped     []int64           // hook pids a tidy killed
	groupKills []int64           // process groups killed after a budget or ctx end
}

func newFakeGuest(t testing.TB) *fakeGuest {
	return &fakeGuest{
		t: t, files: map[string][]byte{}, handles: map[int64]string{},
		programs: map[string]program{}, runs: map[string]int{},
		procs: map[int64]*running{}, next: 1000,
		modes: map[string]uint32{}, scriptFail: map[string]proc{},
	}
}

// fixed is a program that always behaves like p.
func fixed(p proc) program { return func([]string, int) proc { return p } }

func (g *fakeGuest) Command(_ context.Context, req []byte, timeout time.Duration) ([]byte, error) {
	var r rawReq
	if err := json.Unmarshal(req, &r); err != nil {
		g.t.Errorf("request is not JSON: %v", err)
		return nil, err
	}
	g.mu.Lock()
	g.reqs = append(g.reqs, r.Execute)
	g.timeouts = append(g.timeouts, timeout)
	ov := g.override
	g.mu.Unlock()
	if ov != nil {
		if raw, err, ok := ov(r.Execute, r.Arguments); ok {
			return raw, err
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ret, aerr := g.handle(r.Execute, r.Arguments)
	if aerr != "" {
		return json.Marshal(map[string]any{"error": map[string]string{"class": "GenericError", "desc": aerr}})
	}
	return json.Marshal(map[string]any{"return": ret})
}

func (g *fakeGuest) handle(cmd string, args json.RawMessage) (any, string) {
	switch cmd {
	case cmdPing:
		return struct{}{}, ""
	case cmdSync:
		var a syncArgs
		g.decode(args, &a)
		return a.ID, ""
	case cmdFileOpen:
		return g.open(args)
	case cmdFileWrite:
		var a fileWriteArgs
		g.decode(args, &a)
		data, err := base64.StdEncoding.DecodeString(a.BufB64)
		if err != nil {
			return nil, "bad base64"
		}
		path, ok := g.handles[a.Handle]
		if !ok {
			return nil, "invalid handle"
		}
		g.files[path] = append(g.files[path], data...)
		g.writes = append(g.writes, len(data))
		return fileWriteReply{Count: len(data)}, ""
	case cmdFileClose:
		var a handleArgs
		g.decode(args, &a)
		delete(g.handles, a.Handle)
		g.closed++
		return struct{}{}, ""
	case cmdExec:
		return g.exec(args)
	case cmdExecStatus:
		return g.status(args)
	}
	return nil, "The command " + cmd + " has not been found"
}

func (g *fakeGuest) decode(raw json.RawMessage, v any) {
	if err := json.Unmarshal(raw, v); err != nil {
		g.t.Errorf("bad arguments %s: %v", raw, err)
	}
}

func (g *fakeGuest) open(args json.RawMessage) (any, string) {
	var a fileOpenArgs
	g.decode(args, &a)
	_, isFile := g.files[a.Path]
	_, isProg := g.programs[a.Path]
	switch a.Mode {
	case "r":
		if !isFile && !isProg {
			return nil, fmt.Sprintf("failed to open file '%s' (mode: 'r'): No such file or directory", a.Path)
		}
	case "w":
		if _, ok := g.files[a.Path]; !ok {
			g.modes[a.Path] = 0o666 // what qemu-ga does, whatever its umask
		}
		g.files[a.Path] = []byte{}
	default:
		return nil, "unexpected mode " + a.Mode
	}
	g.next++
	g.handles[g.next] = a.Path
	return g.next, ""
}

func (g *fakeGuest) exec(args json.RawMessage) (any, string) {
	var a execArgs
	g.decode(args, &a)
	g.execs = append(g.execs, execCall{Path: a.Path, Args: a.Arg})
	g.next++
	pid := g.next
	if a.Path == killBinary {
		target, _ := strconv.ParseInt(a.Arg[len(a.Arg)-1], 10, 64)
		if r, ok := g.procs[target]; ok {
			r.killed = true
		}
		g.procs[pid] = &running{p: proc{}}
		return execReply{PID: pid}, ""
	}
	switch a.Path {
	case setsidBinary:
		return g.wrapped(pid, a.Arg)
	case shellBinary:
		g.procs[pid] = &running{p: g.script(a.Arg)}
		return execReply{PID: pid}, ""
	}
	prog, ok := g.programs[a.Path]
	if !ok {
		return nil, fmt.Sprintf("Failed to execute child process “%s” (No such file or directory)", a.Path)
	}
	g.runs[a.Path]++
	g.procs[pid] = &running{p: prog(a.Arg, g.runs[a.Path])}
	return execReply{PID: pid}, ""
}

// wrapped plays "setsid sh -c wrapScript bigfleet-hook <dir> <name> hook
// args...": the pid record, then the hook in place (exit 127 from the
// shell's exec when the hook does not exist). The exec is logged as the
// hook's own, so execsOf(hook) sees it.
func (g *fakeGuest) wrapped(pid int64, args []string) (any, string) {
	if len(args) >= 9 && args[0] == shellBinary && args[1] == "-c" && args[2] == tracedWrapScript && args[3] == "bigfleet-traced" {
		return g.traced(pid, args)
	}
	if len(args) < 7 || args[0] != shellBinary || args[1] != "-c" || args[2] != wrapScript || args[3] != "bigfleet-hook" {
		g.t.Errorf("setsid run without the pid-recording wrapper: %q", args)
		return nil, "bad wrapper"
	}
	dir, name, hook := args[4], args[5], args[6]
	g.execs[len(g.execs)-1] = execCall{Path: hook, Args: args[7:]}
	g.files[dir+"/"+name+".pgid"] = []byte(strconv.FormatInt(pid, 10) + " 4242\n")
	prog, ok := g.programs[hook]
	if !ok {
		g.procs[pid] = &running{p: proc{Exit: 127, Stderr: "sh: exec: " + hook + ": not found"}}
		return execReply{PID: pid}, ""
	}
	g.runs[hook]++
	g.procs[pid] = &running{p: prog(args[7:], g.runs[hook])}
	return execReply{PID: pid}, ""
}

// traced plays "setsid sh -c tracedWrapScript bigfleet-traced <dir>
// <name> <trace> <op> hook args...": wrapped's pid record, then the
// trace's "started" line; status writes the exit line.
func (g *fakeGuest) traced(pid int64, args []string) (any, string) {
	trace, op := args[6], args[7]
	plain := append([]string{args[0], args[1], wrapScript, "bigfleet-hook", args[4], args[5]}, args[8:]...)
	ret, e := g.wrapped(pid, plain)
	g.files[trace] = []byte(op + " started " + strconv.FormatInt(pid, 10) + " 4242\n")
	if r, ok := g.procs[pid]; ok {
		r.trace, r.op = trace, op
	}
	return ret, e
}

// probe plays probeScript on the fake's files and processes.
func (g *fakeGuest) probe(trace, op string) string {
	f := strings.Fields(string(g.files[trace]))
	if len(f) < 3 || f[0] != op {
		return "none\n"
	}
	switch f[1] {
	case "exit":
		return "exit " + f[2] + "\n"
	case "started":
		pid, _ := strconv.ParseInt(f[2], 10, 64)
		if r, ok := g.procs[pid]; ok && !r.killed {
			return "running\n"
		}
		return "started\n"
	}
	return "none\n"
}

// script plays one bookkeeping script ("-c", script, $0, args...).
func (g *fakeGuest) script(args []string) proc {
	if len(args) < 3 || args[0] != "-c" {
		g.t.Errorf("unexpected shell run %q", args)
		return proc{Exit: 2}
	}
	name, a := args[2], args[3:]
	g.scripts = append(g.scripts, name)
	if p, ok := g.scriptFail[name]; ok {
		return p
	}
	switch {
	case args[1] == tidyScript && name == "bigfleet-tidy":
		g.tidy(a[0], a[1], a[2], a[3:])
	case args[1] == publishScript && name == "bigfleet-blob":
		src, dst := a[0]+"/"+a[1], a[2]
		data, ok := g.files[src]
		if !ok {
			return proc{Exit: 1, Stderr: "mv: can't rename '" + src + "': No such file or directory"}
		}
		g.files[dst], g.modes[dst] = data, g.modes[src]
		delete(g.files, src)
		delete(g.modes, src)
	case args[1] == probeScript && name == "bigfleet-probe":
		return proc{Stdout: g.probe(a[0], a[1])}
	case args[1] == groupKillScript && name == "bigfleet-kill":
		target, _ := strconv.ParseInt(a[0], 10, 64)
		g.groupKills = append(g.groupKills, target)
		if r, ok := g.procs[target]; ok {
			r.killed = true
		}
	default:
		g.t.Errorf("unknown script %s: %q", name, args[1])
		return proc{Exit: 2}
	}
	return proc{}
}

// tidy plays tidyScript: kill every recorded hook still running, drop the
// records and the private blob directory, and maybe create the blob file.
func (g *fakeGuest) tidy(dir, tmp, file string, hooks []string) {
	for _, h := range hooks {
		rec := dir + "/" + h + ".pgid"
		raw, ok := g.files[rec]
		if !ok {
			continue
		}
		var pid int64
		fmt.Sscan(string(raw), &pid)
		if r, ok := g.procs[pid]; ok && !r.killed {
			r.killed = true
			g.reaped = append(g.reaped, pid)
		}
		delete(g.files, rec)
	}
	for p := range g.files {
		if strings.HasPrefix(p, tmp+"/") {
			delete(g.files, p)
			delete(g.modes, p)
		}
	}
	if file != "" {
		g.files[tmp+"/"+file], g.modes[tmp+"/"+file] = []byte{}, 0o600
	}
}

func (g *fakeGuest) status(args json.RawMessage) (any, string) {
	var a pidArgs
	g.decode(args, &a)
	r, ok := g.procs[a.PID]
	if !ok {
		return nil, fmt.Sprintf("Invalid parameter 'pid'")
	}
	switch {
	case r.killed:
		delete(g.procs, a.PID)
		sig := 9
		return execStatusReply{Exited: true, Signal: &sig}, ""
	case r.p.Hang || r.polls < r.p.Polls:
		r.polls++
		return execStatusReply{Exited: false}, ""
	}
	delete(g.procs, a.PID)
	if r.trace != "" && r.p.Signal == 0 {
		g.files[r.trace] = []byte(fmt.Sprintf("%s exit %d\n", r.op, r.p.Exit))
	}
	st := execStatusReply{
		Exited:  true,
		OutData: base64.StdEncoding.EncodeToString([]byte(r.p.Stdout)),
		ErrData: base64.StdEncoding.EncodeToString([]byte(r.p.Stderr)),
	}
	if r.p.Signal != 0 {
		st.Signal = &r.p.Signal
	} else {
		st.ExitCode = &r.p.Exit
	}
	return st, ""
}

// execsOf returns the argv tails of every run of path.
func (g *fakeGuest) execsOf(path string) [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out [][]string
	for _, e := range g.execs {
		if e.Path == path {
			out = append(out, e.Args)
		}
	}
	return out
}

// fakeClock advances only when slept on. Like a real sleep, it fails once
// ctx is done or the sleep would pass ctx's deadline (jumping to it).
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	if dl, ok := ctx.Deadline(); ok && c.now.Add(d).After(dl) {
		c.now = dl
		return context.DeadlineExceeded
	}
	c.now = c.now.Add(d)
	return nil
}

func (c *fakeClock) slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// newTestClient wires a fake guest and a fake clock to a Client.
func newTestClient(t testing.TB) (*Client, *fakeGuest, *fakeClock) {
	g := newFakeGuest(t)
	clk := newFakeClock()
	return NewClient(g, WithClock(clk), WithTimeout(5*time.Second)), g, clk
}
