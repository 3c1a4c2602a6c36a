package store

import (
	"encoding/binary"
	"errors"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// A time in a record is a bytes field (store.proto) holding two bare
// varints: the seconds since the Unix epoch (zigzag) and the nanoseconds.
// Every time.Time instant fits, unlike UnixNano's years 1678-2262. The
// location is not kept (readers get UTC), as with JSON. The zero time is
// no bytes, so the field is absent.

// timeBuf hands out the time fields of one record from one allocation.
type timeBuf []byte

// newTimeBuf has room for n times.
func newTimeBuf(n int) timeBuf { return make(timeBuf, 0, n*2*binary.MaxVarintLen64) }

// encode returns t's bytes, nil for the zero time.
func (tb *timeBuf) encode(t time.Time) []byte {
	if t.IsZero() {
		return nil
	}
	at := len(*tb)
	b := protowire.AppendVarint(*tb, protowire.EncodeZigZag(t.Unix()))
	b = protowire.AppendVarint(b, uint64(t.Nanosecond()))
	*tb = b
	return b[at:len(b):len(b)]
}

var errMalformedTime = errors.New("malformed time")

func decodeTime(b []byte) (time.Time, error) {
	if len(b) == 0 {
		return time.Time{}, nil
	}
	sec, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return time.Time{}, errMalformedTime
	}
	nsec, m := protowire.ConsumeVarint(b[n:])
	if m < 0 || n+m != len(b) || nsec >= 1e9 {
		return time.Time{}, errMalformedTime
	}
	return time.Unix(protowire.DecodeZigZag(sec), int64(nsec)).UTC(), nil
}
