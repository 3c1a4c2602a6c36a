package server

import "net/http"

// Go's HTTP/2 server runs every stream's handler on a new goroutine, which
// starts with the runtime's starting stack (the average stack in use at the
// last GC, rounded up to a power of two: a few KiB, since most goroutines
// are idle and shallow). A unary Connect call runs deeper than that, so
// each call grew its goroutine's stack two or three times on the way down,
// and each growth copies every frame already on the stack (finding each
// frame's pointer map): 12% of the serving process's user CPU in a Get
// load on one connection (perf, issue 24), in a bare handler as much as in
// ours. Growing the stack once, first thing, while only the server's few
// frames are on it, costs one small copy instead.

// stackReserve is the frame presize allocates: the stack becomes 16 KiB
// (the next power of two that fits it), enough for a unary call's depth.
const stackReserve = 8 << 10

// presized calls h on a stack grown to fit a whole call at once.
type presized struct{ h http.Handler }

func (p presized) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	growStack()
	p.h.ServeHTTP(w, r)
}

// growStack needs a stackReserve frame: on a smaller stack, the runtime
// grows it before the call. The stack keeps its size after the return.
//
//go:noinline
func growStack() {
	var frame [stackReserve]byte
	keep(frame[:])
}

//go:noinline
func keep([]byte) {}
