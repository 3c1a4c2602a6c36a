package guestagent

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// Command names, as qemu-ga spells them.
const (
	cmdPing       = "guest-ping"
	cmdSync       = "guest-sync"
	cmdFileOpen   = "guest-file-open"
	cmdFileWrite  = "guest-file-write"
	cmdFileClose  = "guest-file-close"
	cmdExec       = "guest-exec"
	cmdExecStatus = "guest-exec-status"
)

// request is the envelope of every agent command. Arguments is omitted for
// commands that take none: qemu-ga rejects unexpected members.
type request struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
}

type syncArgs struct {
	ID int64 `json:"id"`
}

type fileOpenArgs struct {
	Path string `json:"path"`
	Mode string `json:"mode,omitempty"`
}

type fileWriteArgs struct {
	Handle int64  `json:"handle"`
	BufB64 string `json:"buf-b64"`
	Count  *int   `json:"count,omitempty"`
}

type fileWriteReply struct {
	Count int  `json:"count"`
	EOF   bool `json:"eof"`
}

type handleArgs struct {
	Handle int64 `json:"handle"`
}

type execArgs struct {
	Path          string   `json:"path"`
	Arg           []string `json:"arg,omitempty"`
	CaptureOutput bool     `json:"capture-output,omitempty"`
}

type execReply struct {
	PID int64 `json:"pid"`
}

type pidArgs struct {
	PID int64 `json:"pid"`
}

// execStatusReply mirrors GuestExecStatus; the optional members are only
// present once the process exited.
type execStatusReply struct {
	Exited       bool   `json:"exited"`
	ExitCode     *int   `json:"exitcode"`
	Signal       *int   `json:"signal"`
	OutData      string `json:"out-data"`
	ErrData      string `json:"err-data"`
	OutTruncated bool   `json:"out-truncated"`
	ErrTruncated bool   `json:"err-truncated"`
}

// ExecStatus is the decoded state of a process started with guest-exec.
// ExitCode is set when the process exited normally, Signal when a signal
// killed it; both are nil while it runs.
type ExecStatus struct {
	Exited       bool
	ExitCode     *int
	Signal       *int
	Stdout       []byte
	Stderr       []byte
	OutTruncated bool // qemu-ga caps captured output (16 MiB) and says so
	ErrTruncated bool
}

// reply is the envelope of every agent answer.
type reply struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
}

// errMalformed marks a reply that is not what the protocol promises.
var errMalformed = errors.New("malformed agent reply")

// decodeReply splits a raw reply into its "return" value or an *AgentError.
func decodeReply(raw []byte) (json.RawMessage, error) {
	var r reply
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if r.Error != nil {
		return nil, &AgentError{Class: r.Error.Class, Desc: r.Error.Desc}
	}
	if len(r.Return) == 0 {
		return nil, fmt.Errorf("%w: neither return nor error", errMalformed)
	}
	return r.Return, nil
}

// decodeReturn decodes a reply's "return" value into out.
func decodeReturn(raw []byte, out any) error {
	ret, err := decodeReply(raw)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(ret, out); err != nil {
		return fmt.Errorf("%w: %v", errMalformed, err)
	}
	return nil
}

// decodeExecStatus turns a guest-exec-status reply into an ExecStatus.
func decodeExecStatus(raw []byte) (ExecStatus, error) {
	var r execStatusReply
	if err := decodeReturn(raw, &r); err != nil {
		return ExecStatus{}, err
	}
	out, err := base64.StdEncoding.DecodeString(r.OutData)
	if err != nil {
		return ExecStatus{}, fmt.Errorf("%w: out-data: %v", errMalformed, err)
	}
	errData, err := base64.StdEncoding.DecodeString(r.ErrData)
	if err != nil {
		return ExecStatus{}, fmt.Errorf("%w: err-data: %v", errMalformed, err)
	}
	return ExecStatus{
		Exited:       r.Exited,
		ExitCode:     r.ExitCode,
		Signal:       r.Signal,
		Stdout:       out,
		Stderr:       errData,
		OutTruncated: r.OutTruncated,
		ErrTruncated: r.ErrTruncated,
	}, nil
}
