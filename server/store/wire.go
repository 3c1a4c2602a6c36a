package store

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Primitives of the binary record format (record.go, offering.go): protobuf
// wire encoding written by hand. It needs no generated code, skips absent
// fields, and stays readable by any protobuf tool for debugging (each
// record after its leading format byte is a valid protobuf message).

// appendString appends a non-empty string field; "" is absent.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendUint appends a non-zero varint field.
func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendInt appends a non-zero signed field, zigzag-encoded so small
// negative values stay small.
func appendInt(b []byte, num protowire.Number, v int64) []byte {
	return appendUint(b, num, protowire.EncodeZigZag(v))
}

// appendFloat appends a float's exact bits (NaN payloads and -0 included);
// only +0 is absent.
func appendFloat(b []byte, num protowire.Number, f float64) []byte {
	bits := math.Float64bits(f)
	if bits == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, bits)
}

// appendTime appends a non-zero time as seconds (zigzag) and nanoseconds
// since the Unix epoch: every time.Time instant fits, unlike UnixNano's
// years 1678-2262. The location is not kept (readers get UTC), as with JSON.
func appendTime(b []byte, num protowire.Number, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	return appendNested(b, num, func(b []byte) []byte {
		b = protowire.AppendVarint(b, protowire.EncodeZigZag(t.Unix()))
		return protowire.AppendVarint(b, uint64(t.Nanosecond()))
	})
}

// appendMap appends one nested entry (key 1, value 2) per element, in key
// order so equal maps encode to equal bytes (offerings are deduplicated by
// their bytes).
func appendMap(b []byte, num protowire.Number, m map[string]string) []byte {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b = appendNested(b, num, func(b []byte) []byte {
			b = protowire.AppendTag(b, 1, protowire.BytesType)
			b = protowire.AppendString(b, k)
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			return protowire.AppendString(b, m[k])
		})
	}
	return b
}

// appendNested appends a length-delimited field whose body f appends. The
// length is reserved as one byte (most bodies are under 128 bytes) and
// widened in place when it is not enough, so no scratch buffer is needed.
func appendNested(b []byte, num protowire.Number, f func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	at := len(b)
	b = f(append(b, 0))
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	w := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, w-1)...)
	copy(b[at+w:], b[at+1:at+1+n])
	protowire.AppendVarint(b[:at], uint64(n)) // writes into b's array: cap suffices
	return b
}

// decoder reads fields from a record, keeping the first error; every read
// after an error returns a zero value, so callers check err once at the end.
type decoder struct {
	b   []byte
	err error
}

// next returns the next field's number and type; false at the end or
// after an error.
func (d *decoder) next() (protowire.Number, protowire.Type, bool) {
	if d.err != nil || len(d.b) == 0 {
		return 0, 0, false
	}
	num, typ, n := protowire.ConsumeTag(d.b)
	if n < 0 {
		d.err = fmt.Errorf("field tag: %w", protowire.ParseError(n))
		return 0, 0, false
	}
	d.b = d.b[n:]
	return num, typ, true
}

func (d *decoder) want(num protowire.Number, got, want protowire.Type) bool {
	if d.err == nil && got != want {
		d.err = fmt.Errorf("field %d has wire type %d, want %d", num, got, want)
	}
	return d.err == nil
}

func (d *decoder) uint(num protowire.Number, typ protowire.Type) uint64 {
	if !d.want(num, typ, protowire.VarintType) {
		return 0
	}
	v, n := protowire.ConsumeVarint(d.b)
	if n < 0 {
		d.err = fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int(num protowire.Number, typ protowire.Type) int64 {
	return protowire.DecodeZigZag(d.uint(num, typ))
}

func (d *decoder) float(num protowire.Number, typ protowire.Type) float64 {
	if !d.want(num, typ, protowire.Fixed64Type) {
		return 0
	}
	v, n := protowire.ConsumeFixed64(d.b)
	if n < 0 {
		d.err = fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		return 0
	}
	d.b = d.b[n:]
	return math.Float64frombits(v)
}

// bytes returns a length-delimited body, aliasing the input.
func (d *decoder) bytes(num protowire.Number, typ protowire.Type) []byte {
	if !d.want(num, typ, protowire.BytesType) {
		return nil
	}
	v, n := protowire.ConsumeBytes(d.b)
	if n < 0 {
		d.err = fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		return nil
	}
	d.b = d.b[n:]
	return v
}

// string copies: the input may be bbolt's mmap, valid only in its transaction.
func (d *decoder) string(num protowire.Number, typ protowire.Type) string {
	return string(d.bytes(num, typ))
}

func (d *decoder) time(num protowire.Number, typ protowire.Type) time.Time {
	body := decoder{b: d.bytes(num, typ)}
	sec := protowire.DecodeZigZag(body.uint(num, protowire.VarintType))
	nsec := body.uint(num, protowire.VarintType)
	switch {
	case d.err != nil:
		return time.Time{}
	case body.err != nil:
		d.err = body.err
	case len(body.b) != 0 || nsec >= 1e9:
		d.err = fmt.Errorf("field %d: malformed time", num)
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

// mapEntry adds one nested key/value entry to *m, creating it if needed.
func (d *decoder) mapEntry(num protowire.Number, typ protowire.Type, m *map[string]string) {
	body := decoder{b: d.bytes(num, typ)}
	var k, v string
	for n, t, ok := body.next(); ok; n, t, ok = body.next() {
		switch n {
		case 1:
			k = body.string(n, t)
		case 2:
			v = body.string(n, t)
		default:
			body.unknown(n)
		}
	}
	if d.err == nil && body.err != nil {
		d.err = fmt.Errorf("field %d: map entry: %w", num, body.err)
	}
	if d.err != nil {
		return
	}
	if *m == nil {
		*m = make(map[string]string, 4)
	}
	(*m)[k] = v
}

// unknown refuses a field this version does not know: the format byte, not
// optional fields, is how the format evolves, so an unknown field means a
// damaged record.
func (d *decoder) unknown(num protowire.Number) {
	if d.err == nil {
		d.err = fmt.Errorf("unknown field %d", num)
	}
}
