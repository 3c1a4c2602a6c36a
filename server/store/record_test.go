package store

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// fillRandom sets every field of the struct v points to, recursively, to
// a random non-zero value. A field of a kind it does not know fails the
// test, so a new field of record.Machine or record.Transition cannot
// go unnoticed: either it is filled, and the round trip below fails until
// the codec stores it, or this function must learn its kind.
func fillRandom(t *testing.T, r *rand.Rand, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString(randString(r))
	case reflect.Int, reflect.Int32, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			t.Fatalf("%s: durations need a codec decision", path)
		}
		n := r.Int64N(1<<40) + 1
		if r.IntN(2) == 0 {
			n = -n
		}
		if v.Kind() == reflect.Int32 {
			n = int64(int32(n)) | 1
		}
		v.SetInt(n)
	case reflect.Uint64:
		v.SetUint(r.Uint64() | 1)
	case reflect.Float64:
		v.SetFloat([]float64{r.Float64() + 1e-9, -r.Float64() - 1, math.Inf(1), 1e300, math.SmallestNonzeroFloat64}[r.IntN(5)])
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 1 + r.IntN(4) {
			m.SetMapIndex(reflect.ValueOf(randString(r)), reflect.ValueOf(randString(r)))
		}
		v.Set(m)
	case reflect.Slice:
		n := 1 + r.IntN(3)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range s.Len() {
			fillRandom(t, r, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			// Any instant, nanoseconds included, far past and future too.
			sec := r.Int64N(1<<36) - 1<<35
			v.Set(reflect.ValueOf(time.Unix(sec, r.Int64N(1e9)).UTC()))
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue // in-memory only (Machine.encoding, a cache), never stored
			}
			fillRandom(t, r, v.Field(i), path+"."+f.Name)
			if v.Field(i).IsZero() {
				t.Fatalf("%s.%s: still zero after filling", path, f.Name)
			}
		}
	default:
		t.Fatalf("%s: kind %s not handled: teach fillRandom and the codec", path, v.Kind())
	}
}

func randString(r *rand.Rand) string {
	pool := []string{"a", "ž", "🐴", "\x00", "\n", "\"", "{", "\x01", "zone-a", strings.Repeat("x", 130)}
	var b strings.Builder
	for range 1 + r.IntN(4) {
		b.WriteString(pool[r.IntN(len(pool))])
	}
	return b.String()
}

// roundTrip encodes m as Commit does and decodes it as Load does.
func roundTrip(t testing.TB, m record.Machine) record.Machine {
	t.Helper()
	table := newOfferingTable()
	enc := encodeOffering(&m)
	off, _ := table.ref(enc)
	offerings := map[uint64]*offering{}
	if off != 0 {
		o, err := decodeOffering(enc)
		must(t, err)
		offerings[off] = o
	}
	got, err := decodeMachine([]byte(m.ID), encodeRecord(&m, off), func(id uint64) (*offering, bool) {
		o, ok := offerings[id]
		return o, ok
	})
	must(t, err)
	return got
}

// Every field of a machine, and of each transition of its history, comes
// back exactly: random values, 200 times.
func TestRecordRoundTripEveryField(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		var m record.Machine
		fillRandom(t, r, reflect.ValueOf(&m).Elem(), "Machine")
		if got := roundTrip(t, m); !reflect.DeepEqual(got, m) {
			t.Fatalf("case %d differs:\n got %+v\nwant %+v", i, got, m)
		}
	}
}

// Each field on its own: a record with only that field set (and the id)
// comes back with exactly it, so no field leaks into another or is read
// from the wrong place.
func TestRecordRoundTripFieldByField(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	var full record.Machine
	fillRandom(t, r, reflect.ValueOf(&full).Elem(), "Machine")
	typ := reflect.TypeFor[record.Machine]()
	for i := range typ.NumField() {
		if !typ.Field(i).IsExported() {
			continue
		}
		m := record.Machine{ID: full.ID}
		reflect.ValueOf(&m).Elem().Field(i).Set(reflect.ValueOf(full).Field(i))
		if got := roundTrip(t, m); !reflect.DeepEqual(got, m) {
			t.Errorf("%s alone: got %+v, want %+v", typ.Field(i).Name, got, m)
		}
	}
}

// The fixed cases every store must keep (NUL, control characters, zoned
// times, 1e300) and -0, which JSON could not keep apart from 0.
func TestRecordRoundTripCases(t *testing.T) {
	t.Parallel()
	for _, m := range roundTripCases() {
		requireSameMachine(t, roundTrip(t, m), m)
	}
	neg := record.Machine{ID: "neg", PricePerHour: math.Copysign(0, -1)}
	if got := roundTrip(t, neg); !math.Signbit(got.PricePerHour) {
		t.Fatal("-0 price came back as +0")
	}
}

// Machines of one offering share one offering entry (and so one set of
// maps); a different price is a different offering.
func TestOfferingsShared(t *testing.T) {
	t.Parallel()
	a, b := sampleMachine("a"), sampleMachine("b")
	b.Labels = map[string]string{"id": "a", "pool": "a"} // a's labels, another map
	c := sampleMachine("a")
	c.PricePerHour = 0.25
	table := newOfferingTable()
	ia, wa := table.ref(encodeOffering(&a))
	ib, wb := table.ref(encodeOffering(&b))
	ic, _ := table.ref(encodeOffering(&c))
	if ia != ib || ia == ic || ia == 0 || !wa || !wb {
		t.Fatalf("ids %d %d %d (write %v %v): want a = b != c, all non-zero, unwritten", ia, ib, ic, wa, wb)
	}
	table.committed([]uint64{ia})
	if _, w := table.ref(encodeOffering(&b)); w {
		t.Fatal("a committed offering is written again")
	}
	if id, w := table.ref(encodeOffering(&record.Machine{ID: "x"})); id != 0 || w {
		t.Fatalf("empty offering: id %d write %v, want 0 false", id, w)
	}
}

// A seeded slot's record is a small fraction of its JSON (the point of
// the format): what its offering shares is stored once.
func TestRecordIsCompact(t *testing.T) {
	t.Parallel()
	m := record.Machine{ID: "zone-a-kvm-small-0001", State: record.Speculative,
		InstanceType: "kvm.small", Zone: "zone-a", CapacityType: record.CapacityOnDemand, PricePerHour: 0.0092,
		Resources:   map[string]string{"cpu": "1800m", "memory": "3584Mi"},
		Allocatable: map[string]string{"cpu": "2", "memory": "4Gi"},
		Labels: map[string]string{"node.kubernetes.io/instance-type": "kvm.small",
			"topology.kubernetes.io/zone": "zone-a"},
		VCPU: 2, MemoryMiB: 4096, StateSince: t0, Revision: 100_000}
	bin := len(encodeRecord(&m, 1))
	js := len(encodeMachineJSON(t, &m))
	if bin*10 > js {
		t.Fatalf("binary record %d bytes, JSON %d: want under a tenth", bin, js)
	}
	t.Logf("seeded slot: binary %d bytes, JSON %d", bin, js)
}

func TestDecodeRefusesDamage(t *testing.T) {
	t.Parallel()
	m := sampleMachine("m")
	good := encodeRecord(&m, 7)
	none := func(uint64) (*offering, bool) { return nil, false }
	some := func(uint64) (*offering, bool) { return &offering{}, true }
	cases := map[string]struct {
		v      []byte
		lookup offeringLookup
		want   string
	}{
		"empty":            {nil, some, "empty record"},
		"unknown format":   {[]byte{0x02, 0x08, 0x01}, some, "unknown record format 0x02"},
		"missing offering": {good, none, "offering 7 is not in the file"},
		"truncated":        {good[:len(good)-3], some, "decode machine"},
		"unknown field":    {append(bytes.Clone(good), 0xf8, 0x01, 0x01), some, "unknown field 31"},
		"wrong wire type":  {[]byte{formatBinaryV1, 0x0a, 0x00}, some, "field 1 (state) has wire type 2"},
		"bad JSON":         {[]byte(`{"id":`), some, "JSON record"},
	}
	for name, c := range cases {
		_, err := decodeMachine([]byte("m"), c.v, c.lookup)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to say %q", name, err, c.want)
		}
	}
}

// FuzzDecodeRecord: the decoder reads bytes from disk, so no input may
// panic it, and whatever it accepts must encode and decode to the same
// record again (compared as bytes: NaN is not equal to itself).
func FuzzDecodeRecord(f *testing.F) {
	for _, m := range roundTripCases() {
		f.Add(encodeRecord(&m, 1), encodeOffering(&m))
		f.Add(encodeMachineJSON(f, &m), []byte{formatBinaryV1})
	}
	for name := range goldenCases() {
		rec, err := os.ReadFile(goldenPath(name, "record"))
		must(f, err)
		off, err := os.ReadFile(goldenPath(name, "offering"))
		must(f, err)
		f.Add(rec, off)
	}
	f.Add([]byte{formatBinaryV1, 0x82, 0x01, 0x02, 0x08}, []byte{formatBinaryV1, 0x32, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, rec, off []byte) {
		o, err := decodeOffering(off)
		if err != nil {
			o = nil
		}
		lookup := func(id uint64) (*offering, bool) { return o, o != nil && id == 1 }
		m, err := decodeMachine([]byte("k"), rec, lookup)
		if err != nil {
			return
		}
		m.ID = "k" // a JSON record carries its own id
		again := roundTrip(t, m)
		if a, b := encodeRecord(&m, 0), encodeRecord(&again, 0); !bytes.Equal(a, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", a, b)
		}
		if a, b := encodeOffering(&m), encodeOffering(&again); !bytes.Equal(a, b) {
			t.Fatalf("offering re-encoding differs:\n%x\n%x", a, b)
		}
	})
}
