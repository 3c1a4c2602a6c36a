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

func encodeTime(t time.Time) []byte {
	if t.IsZero() {
		return nil
	}
	b := make([]byte, 0, 2*binary.MaxVarintLen64)
	b = protowire.AppendVarint(b, protowire.EncodeZigZag(t.Unix()))
	return protowire.AppendVarint(b, uint64(t.Nanosecond()))
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
