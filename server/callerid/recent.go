package callerid

import (
	"sync"
	"time"
)

// RecentLimit is how many refusals the admin page can show.
const RecentLimit = 64

// Rejection is one refused call as the admin page shows it.
type Rejection struct {
	At        time.Time
	Method    string
	Reason    Reason
	Presented string
	Needed    string
	Peer      string
	Protocol  string
}

// ring keeps the last n rejections.
type ring struct {
	mu   sync.Mutex
	buf  []Rejection
	next int
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]Rejection, n)} }

func (r *ring) add(x Rejection) {
	r.mu.Lock()
	r.buf[r.next] = x
	r.next = (r.next + 1) % len(r.buf)
	r.full = r.full || r.next == 0
	r.mu.Unlock()
}

// list returns the kept rejections, newest first.
func (r *ring) list() []Rejection {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	if r.full {
		n = len(r.buf)
	}
	out := make([]Rejection, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, r.buf[(r.next-i+len(r.buf))%len(r.buf)])
	}
	return out
}
