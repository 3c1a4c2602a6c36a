package guestagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPingAndSync(t *testing.T) {
	t.Parallel()
	c, g, _ := newTestClient(t)
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if err := c.Sync(t.Context()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if want := []string{cmdPing, cmdSync}; !reflect.DeepEqual(g.reqs, want) {
		t.Fatalf("requests %v, want %v", g.reqs, want)
	}
	for _, d := range g.timeouts {
		if d != 5*time.Second {
			t.Errorf("transport got timeout %v, want the per-command 5s", d)
		}
	}
}

func TestSyncRejectsWrongEcho(t *testing.T) {
	t.Parallel()
	c, g, _ := newTestClient(t)
	g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
		return []byte(`{"return":42}`), nil, true // a stale reply
	}
	err := c.Sync(t.Context())
	if err == nil || !strings.HasPrefix(err.Error(), "guest-sync: reply id 42") {
		t.Fatalf("Sync = %v, want id mismatch", err)
	}
}

func TestRequestsAreWellFormedJSON(t *testing.T) {
	t.Parallel()
	var got []map[string]any
	tr := TransportFunc(func(_ context.Context, req []byte, _ time.Duration) ([]byte, error) {
		var m map[string]any
		if err := json.Unmarshal(req, &m); err != nil {
			t.Fatalf("invalid JSON %q: %v", req, err)
		}
		got = append(got, m)
		return []byte(`{"return":{"pid":7}}`), nil
	})
	c := NewClient(tr)
	argv := []string{`a "quoted" arg`, "$(rm -rf /)", "new\nline", "ünï"}
	if _, err := c.Exec(t.Context(), "/opt/x y", argv, true); err != nil {
		t.Fatal(err)
	}
	args := got[0]["arguments"].(map[string]any)
	if got[0]["execute"] != "guest-exec" || args["path"] != "/opt/x y" || args["capture-output"] != true {
		t.Fatalf("request %v", got[0])
	}
	var back []string
	for _, a := range args["arg"].([]any) {
		back = append(back, a.(string))
	}
	if !reflect.DeepEqual(back, argv) {
		t.Fatalf("argv %q, want %q", back, argv)
	}
	_ = c.Ping(t.Context())
	if _, ok := got[1]["arguments"]; ok {
		t.Fatalf("guest-ping must carry no arguments: %v", got[1])
	}
}

func TestAgentErrorNamesCommand(t *testing.T) {
	t.Parallel()
	c, _, _ := newTestClient(t)
	_, err := c.Exec(t.Context(), "/nope", nil, true)
	if err == nil || !strings.HasPrefix(err.Error(), "guest-exec: agent error GenericError: Failed to execute") {
		t.Fatalf("err = %v", err)
	}
	var ae *AgentError
	if !errors.As(err, &ae) || ae.Class != "GenericError" || IsAgentUnavailable(err) {
		t.Fatalf("err %v not classified as an agent error", err)
	}
}

func TestTransportErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		err         error
		prefix      string
		unavailable bool
		agent       bool
	}{
		{"plain", errors.New("connection reset"), "guest-ping: transport: connection reset", false, false},
		{"marked unavailable", fmt.Errorf("agent not connected: %w", ErrAgentUnavailable), "guest-ping: agent not connected", true, false},
		{"out of band agent error", &AgentError{Class: "GenericError", Desc: "boom"}, "guest-ping: agent error GenericError: boom", false, true},
		{"transport deadline", context.DeadlineExceeded, "guest-ping: no reply within 5s", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := NewClient(TransportFunc(func(context.Context, []byte, time.Duration) ([]byte, error) {
				return nil, tc.err
			}), WithTimeout(5*time.Second))
			err := c.Ping(t.Context())
			if err == nil || !strings.HasPrefix(err.Error(), tc.prefix) {
				t.Fatalf("err = %v, want prefix %q", err, tc.prefix)
			}
			if IsAgentUnavailable(err) != tc.unavailable || IsAgentError(err) != tc.agent {
				t.Fatalf("classification of %v: unavailable=%v agent=%v", err, IsAgentUnavailable(err), IsAgentError(err))
			}
		})
	}
}

func TestPerCommandTimeout(t *testing.T) {
	t.Parallel()
	for _, honoursCtx := range []bool{true, false} {
		t.Run(fmt.Sprintf("honoursCtx=%v", honoursCtx), func(t *testing.T) {
			t.Parallel()
			block := make(chan struct{})
			t.Cleanup(func() { close(block) })
			c := NewClient(TransportFunc(func(ctx context.Context, _ []byte, _ time.Duration) ([]byte, error) {
				if honoursCtx {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				<-block // a cgo call that cannot be interrupted
				return nil, errors.New("late")
			}), WithTimeout(20*time.Millisecond))
			start := time.Now()
			_, err := c.Exec(t.Context(), "/opt/bigfleet/bootstrap", nil, true)
			if !IsAgentUnavailable(err) || !strings.Contains(err.Error(), "guest-exec: no reply within 20ms") {
				t.Fatalf("err = %v", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("timeout took %v", d)
			}
		})
	}
}

func TestCallerCancellationIsNotUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	c := NewClient(TransportFunc(func(ctx context.Context, _ []byte, _ time.Duration) ([]byte, error) {
		cancel()
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	err := c.Ping(ctx)
	if !errors.Is(err, context.Canceled) || IsAgentUnavailable(err) {
		t.Fatalf("err = %v", err)
	}
}

func TestFileWriteShortWrite(t *testing.T) {
	t.Parallel()
	c, g, _ := newTestClient(t)
	g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
		return []byte(`{"return":{"count":3,"eof":false}}`), nil, cmd == cmdFileWrite
	}
	n, err := c.FileWrite(t.Context(), 1, []byte("abcdef"))
	if n != 3 || err == nil || err.Error() != "guest-file-write: short write: 3 of 6 bytes" {
		t.Fatalf("FileWrite = %d, %v", n, err)
	}
}

func TestExecStatusDecodes(t *testing.T) {
	t.Parallel()
	c, g, _ := newTestClient(t)
	g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
		return []byte(`{"return":{"exited":true,"exitcode":3,"out-data":"aGk=","err-data":"AGVycg==","err-truncated":true}}`), nil, true
	}
	st, err := c.ExecStatus(t.Context(), 9)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Exited || st.ExitCode == nil || *st.ExitCode != 3 || st.Signal != nil ||
		string(st.Stdout) != "hi" || string(st.Stderr) != "\x00err" || !st.ErrTruncated || st.OutTruncated {
		t.Fatalf("status %+v", st)
	}
}

func TestExecStatusRejectsBadBase64(t *testing.T) {
	t.Parallel()
	c, g, _ := newTestClient(t)
	g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
		return []byte(`{"return":{"exited":true,"exitcode":0,"out-data":"!!"}}`), nil, true
	}
	_, err := c.ExecStatus(t.Context(), 9)
	if err == nil || !strings.HasPrefix(err.Error(), "guest-exec-status: malformed agent reply: out-data") {
		t.Fatalf("err = %v", err)
	}
}
