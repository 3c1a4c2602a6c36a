package convert

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/backend"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// codeOf is THE error→wire-code table. FailedPrecondition comes from
// record.CodeFenced and nothing else: BigFleet reads it as "you were
// fenced", so any other use would make a shard give up its lease.
var codeOf = map[record.Code]connect.Code{
	record.CodeInvalid:       connect.CodeInvalidArgument,
	record.CodeFenced:        connect.CodeFailedPrecondition,
	record.CodeNotFound:      connect.CodeNotFound,
	record.CodeUnimplemented: connect.CodeUnimplemented,
	record.CodeAborted:       connect.CodeAborted,
	record.CodeUnavailable:   connect.CodeUnavailable,
	record.CodePermission:    connect.CodePermissionDenied,
	record.CodeExhausted:     connect.CodeResourceExhausted,
}

// WireError turns any error a handler, checker or interceptor produced into
// the *connect.Error sent to the client. It is the only caller of
// connect.NewError in the module, so every code this service emits can be
// read off this function and the table above.
func WireError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		// Produced by connect itself (e.g. a message over the read limit).
		return ce
	}
	return connect.NewError(classify(err), err)
}

func classify(err error) connect.Code {
	var le *record.Error
	switch {
	case errors.As(err, &le):
		if c, ok := codeOf[le.Code]; ok {
			return c
		}
		return connect.CodeInternal
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	case errors.Is(err, backend.ErrHostUnavailable):
		// Retryable outages: BigFleet backs off and tries again.
		return connect.CodeUnavailable
	default:
		return connect.CodeInternal
	}
}
