package server

import "errors"

// errPanic is what the recovery interceptor hands to convert.WireError: the
// panic value itself may carry request data, so it never reaches the client.
var errPanic = errors.New("internal error (recovered panic)")
