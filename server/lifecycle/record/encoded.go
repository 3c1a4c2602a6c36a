package record

import "sync/atomic"

// encodingCache holds one published record's encoding. Records are immutable
// once published and every change publishes a new record with a new
// cache, so an encoding can never outlive the revision it was made from.
type encodingCache struct {
	b atomic.Pointer[[]byte]
}

// Encoded returns enc(m), computed at most once per published record (two
// readers racing on the first call may both compute it; the results are
// equal and one is kept). The engine knows nothing of the encoding: the
// wire layer passes the same enc for the life of the process. A nil result
// (enc failed) is not cached. A record that was never published (an Ack's
// copy, a Clone) has no cache and is encoded on every call.
//
// The returned bytes are shared by every reader: never write into them.
func (m *Machine) Encoded(enc func(*Machine) []byte) []byte {
	c := m.encoding
	if c == nil {
		return enc(m)
	}
	if p := c.b.Load(); p != nil {
		return *p
	}
	b := enc(m)
	if b == nil {
		return nil
	}
	c.b.CompareAndSwap(nil, &b)
	return *c.b.Load()
}

// AttachEncodingCache gives a record about to be published its own, empty
// encoding cache (the index calls it as it publishes).
func (m *Machine) AttachEncodingCache() { m.encoding = new(encodingCache) }

// DetachEncodingCache drops the cache from a copy the caller may change, so it
// can never serve its original's bytes.
func (m *Machine) DetachEncodingCache() { m.encoding = nil }
