package record

import "fmt"

// Code classifies an engine error. Package server maps each Code to one wire
// code in one place; CodeFenced is the only source of FailedPrecondition.
type Code int

const (
	CodeInvalid       Code = iota + 1 // InvalidArgument
	CodeFenced                        // FailedPrecondition, fencing only
	CodeNotFound                      // NotFound
	CodeUnimplemented                 // Unimplemented
	CodeAborted                       // Aborted: out of position, conflict, FAILED
	CodeUnavailable                   // Unavailable: cannot accept right now
	CodePermission                    // PermissionDenied (admin writes, caller identity)
	CodeExhausted                     // ResourceExhausted: a machine's fence mark table is full
)

// Error is what every engine method returns on refusal.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Errorf builds an *Error of code.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}
