package meta

import (
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bigfleet/libvirt-provider/backend"
)

// Our metadata element lives in its own namespace inside <metadata>; libvirt
// keys it by the URI and writes it with the prefix.
const (
	NS           = "https://bigfleet.dev/libvirt-provider/1"
	Prefix       = "bigfleet"
	metadataRoot = "instance"
)

// Metadata is what a domain records about its owner and binding.
type Metadata struct {
	Provider      string // provider instance id (--provider)
	MachineID     string
	OperationID   string // the transition that last changed the domain
	ClusterID     string // empty: not bound
	ShardMetadata map[string]string
	// Marks are the machine's fence marks by shard id, so that fencing
	// survives the loss of the state file as the binding does.
	Marks map[string]backend.FenceMark
	// Host is the name of the host the domain was created on ("" for a
	// zone's only --connect host, and in domains made before zones could
	// hold several hosts). Informational: a listing reports the host that
	// listed the domain.
	Host string
	// VCPUs and MemoryMiB are what the domain was sized to use, for the
	// host's books (0: not recorded, a domain made by an older version).
	VCPUs     int
	MemoryMiB int
	// Delete is the intent of a Delete (or Release) begun on the domain,
	// written before anything is destroyed: the domain says it is being
	// deleted even when the state file that knew it is lost.
	Delete DeleteIntent
	// Configure is the intent of a Configure begun on the domain, written
	// before its bootstrap hook may start and removed with the binding
	// (or by its rollback): a provider that lost its state file finds the
	// Configure cut short and asks the guest how it ended.
	Configure ConfigureIntent
	// Term is the leader's term of the replica that last wrote the domain
	// (--leader-elect; zero without): term.go.
	Term backend.LeaderTerm
}

// ConfigureIntent names the Configure begun on a domain, with what its
// end needs (never the bootstrap blob). The zero value: none.
type ConfigureIntent struct {
	OperationID   string
	ClusterID     string
	ShardMetadata map[string]string
	Since         time.Time // when it was written (UTC, informational)
}

// Begun reports whether a Configure was begun.
func (c ConfigureIntent) Begun() bool { return c.OperationID != "" }

// DeleteIntent names the Delete begun on a domain. The zero value: none.
type DeleteIntent struct {
	OperationID string    // the Delete's operation id (its token)
	Since       time.Time // when it was first written (UTC, informational)
}

// Begun reports whether a Delete was begun.
func (d DeleteIntent) Begun() bool { return d.OperationID != "" }

// Owned reports whether the domain belongs to provider's machine.
func (m Metadata) Owned(provider, machineID string) bool {
	return m.Provider == provider && m.MachineID == machineID
}

// The wire form. Text that XML cannot carry byte for byte (control
// characters, invalid UTF-8, edge whitespace libvirt might reformat) is
// stored base64 with encoding="base64"; everything else stays readable.
type xmlText struct {
	Encoding string `xml:"encoding,attr,omitempty"`
	Value    string `xml:",chardata"`
}

type xmlEntry struct {
	Key   xmlText `xml:"key"`
	Value xmlText `xml:"value"`
}

type xmlInstance struct {
	XMLName   xml.Name
	Provider  xmlText       `xml:"provider"`
	Machine   xmlText       `xml:"machine"`
	Operation xmlText       `xml:"operation"`
	Cluster   *xmlText      `xml:"cluster"`
	Shard     []xmlEntry    `xml:"shard-metadata>entry"`
	Marks     []xmlMark     `xml:"fence-marks>mark"`
	Host      *xmlText      `xml:"host"`
	Size      *xmlSize      `xml:"size"`
	Delete    *xmlDelete    `xml:"delete-intent"`
	Configure *xmlConfigure `xml:"configure-intent"`
	Term      *xmlTerm      `xml:"leader-term"`
}

// xmlTerm is a leader's term: the Lease's uid and its transitions count.
type xmlTerm struct {
	Lease string `xml:"lease,attr"`
	N     string `xml:",chardata"`
}

// xmlConfigure is a Configure's intent: its operation, cluster and shard
// metadata, and when.
type xmlConfigure struct {
	Since     string     `xml:"since,attr,omitempty"`
	Operation xmlText    `xml:"operation"`
	Cluster   xmlText    `xml:"cluster"`
	Shard     []xmlEntry `xml:"shard-metadata>entry"`
}

// xmlDelete is a Delete's intent: its operation id, and when.
type xmlDelete struct {
	Since     string  `xml:"since,attr,omitempty"`
	Operation xmlText `xml:"operation"`
}

// xmlSize is the domain's sizing, for placement's books.
type xmlSize struct {
	VCPUs     int `xml:"vcpus,attr"`
	MemoryMiB int `xml:"memory-mib,attr"`
}

// xmlMark is one fence mark. Epoch and sequence are pointers so that a
// missing one is an error, never a silent 0.
type xmlMark struct {
	Shard    xmlText `xml:"shard"`
	Epoch    *int64  `xml:"epoch"`
	Sequence *int64  `xml:"sequence"`
}

const encBase64 = "base64"

func encText(s string) xmlText {
	if xmlSafe(s) {
		return xmlText{Value: s}
	}
	return xmlText{Encoding: encBase64, Value: base64.StdEncoding.EncodeToString([]byte(s))}
}

func (t xmlText) decode() (string, error) {
	switch t.Encoding {
	case "":
		return t.Value, nil
	case encBase64:
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(t.Value))
		return string(b), err
	}
	return "", fmt.Errorf("unknown encoding %q", t.Encoding)
}

// xmlSafe reports whether s survives an XML round trip through libvirt
// unchanged as character data: valid UTF-8, no control characters (XML 1.0
// forbids most, and normalises CR), no non-characters, no leading or
// trailing whitespace.
func xmlSafe(s string) bool {
	if !utf8.ValidString(s) || strings.TrimSpace(s) != s {
		return false
	}
	for _, r := range s {
		switch {
		case r < 0x20, r >= 0x7f && r <= 0x9f, r >= 0xd800 && r <= 0xdfff, r == 0xfffe, r == 0xffff:
			return false
		}
	}
	return true
}

// Marshal renders m. With ns the root carries xmlns (for the <metadata> of a
// domain definition); without, it is the bare element SetMetadata wants
// (libvirt adds the namespace from its key and URI arguments).
func (m Metadata) Marshal(ns bool) (string, error) {
	x := xmlInstance{
		XMLName:   xml.Name{Local: metadataRoot},
		Provider:  encText(m.Provider),
		Machine:   encText(m.MachineID),
		Operation: encText(m.OperationID),
	}
	if ns {
		x.XMLName.Space = NS
	}
	if m.ClusterID != "" {
		c := encText(m.ClusterID)
		x.Cluster = &c
	}
	x.Shard = encShard(m.ShardMetadata)
	shards := make([]string, 0, len(m.Marks))
	for k := range m.Marks {
		shards = append(shards, k)
	}
	sort.Strings(shards)
	for _, k := range shards {
		mk := m.Marks[k]
		x.Marks = append(x.Marks, xmlMark{Shard: encText(k), Epoch: &mk.Epoch, Sequence: &mk.Sequence})
	}
	if m.Host != "" {
		h := encText(m.Host)
		x.Host = &h
	}
	if m.VCPUs > 0 || m.MemoryMiB > 0 {
		x.Size = &xmlSize{VCPUs: m.VCPUs, MemoryMiB: m.MemoryMiB}
	}
	if m.Delete.Begun() {
		x.Delete = &xmlDelete{Operation: encText(m.Delete.OperationID)}
		if !m.Delete.Since.IsZero() {
			x.Delete.Since = m.Delete.Since.UTC().Format(time.RFC3339Nano)
		}
	}
	if c := m.Configure; c.Begun() {
		x.Configure = &xmlConfigure{Operation: encText(c.OperationID), Cluster: encText(c.ClusterID), Shard: encShard(c.ShardMetadata)}
		if !c.Since.IsZero() {
			x.Configure.Since = c.Since.UTC().Format(time.RFC3339Nano)
		}
	}
	if m.Term.Lease != "" {
		x.Term = &xmlTerm{Lease: m.Term.Lease, N: strconv.FormatInt(m.Term.N, 10)}
	}
	out, err := xml.Marshal(x)
	return string(out), err
}

// encShard is shard metadata in key order: stable output, so no spurious
// metadata changes.
func encShard(md map[string]string) []xmlEntry {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []xmlEntry
	for _, k := range keys {
		out = append(out, xmlEntry{Key: encText(k), Value: encText(md[k])})
	}
	return out
}

var errNotOurElement = errors.New("not a bigfleet metadata element")

// Decode parses our element as libvirt returns it (prefixed or with
// a default namespace). It is strict: unknown encodings, bad base64,
// duplicate shard keys and a missing provider or machine id are errors, so a
// damaged element never passes for ours.
func Decode(s string) (Metadata, error) {
	var x xmlInstance
	if err := xml.Unmarshal([]byte(s), &x); err != nil {
		return Metadata{}, fmt.Errorf("decode metadata: %w", err)
	}
	if x.XMLName.Local != metadataRoot || (x.XMLName.Space != NS && x.XMLName.Space != "") {
		return Metadata{}, fmt.Errorf("decode metadata: <%s> in %q: %w", x.XMLName.Local, x.XMLName.Space, errNotOurElement)
	}
	var m Metadata
	var err error
	field := func(dst *string, t xmlText, name string) {
		if err == nil {
			if *dst, err = t.decode(); err != nil {
				err = fmt.Errorf("decode metadata: %s: %w", name, err)
			}
		}
	}
	field(&m.Provider, x.Provider, "provider")
	field(&m.MachineID, x.Machine, "machine")
	field(&m.OperationID, x.Operation, "operation")
	if x.Cluster != nil {
		field(&m.ClusterID, *x.Cluster, "cluster")
	}
	if x.Host != nil {
		field(&m.Host, *x.Host, "host")
	}
	if x.Size != nil {
		if x.Size.VCPUs < 0 || x.Size.MemoryMiB < 0 {
			return Metadata{}, errors.New("decode metadata: negative size")
		}
		m.VCPUs, m.MemoryMiB = x.Size.VCPUs, x.Size.MemoryMiB
	}
	if err != nil {
		return Metadata{}, err
	}
	if m.Provider == "" || m.MachineID == "" {
		return Metadata{}, errors.New("decode metadata: provider or machine id missing")
	}
	if m.ShardMetadata, err = decodeShard(x.Shard); err != nil {
		return Metadata{}, err
	}
	if m.Marks, err = decodeMarks(x.Marks); err != nil {
		return Metadata{}, err
	}
	if m.Delete, err = decodeDelete(x.Delete); err != nil {
		return Metadata{}, err
	}
	if m.Configure, err = decodeConfigure(x.Configure); err != nil {
		return Metadata{}, err
	}
	if m.Term, err = decodeTerm(x.Term); err != nil {
		return Metadata{}, err
	}
	return m, nil
}

// decodeTerm is strict: a term without its Lease, with a count that is
// missing or negative, is damage, never "no election".
func decodeTerm(x *xmlTerm) (backend.LeaderTerm, error) {
	switch {
	case x == nil:
		return backend.LeaderTerm{}, nil
	case x.Lease == "" || !xmlSafe(x.Lease):
		return backend.LeaderTerm{}, fmt.Errorf("decode metadata: leader term: bad lease %q", x.Lease)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(x.N), 10, 64)
	if err != nil || n < 0 {
		return backend.LeaderTerm{}, fmt.Errorf("decode metadata: leader term: count %q is not a whole number ≥ 0", x.N)
	}
	return backend.LeaderTerm{Lease: x.Lease, N: n}, nil
}

// decodeConfigure is strict as decodeDelete: an intent without an
// operation or cluster id, or with a time that does not parse, is damage.
func decodeConfigure(x *xmlConfigure) (ConfigureIntent, error) {
	if x == nil {
		return ConfigureIntent{}, nil
	}
	var c ConfigureIntent
	var err error
	if c.OperationID, err = x.Operation.decode(); err != nil {
		return ConfigureIntent{}, fmt.Errorf("decode metadata: configure intent operation: %w", err)
	}
	if c.ClusterID, err = x.Cluster.decode(); err != nil {
		return ConfigureIntent{}, fmt.Errorf("decode metadata: configure intent cluster: %w", err)
	}
	if c.OperationID == "" || c.ClusterID == "" {
		return ConfigureIntent{}, errors.New("decode metadata: configure intent without an operation or cluster id")
	}
	if c.ShardMetadata, err = decodeShard(x.Shard); err != nil {
		return ConfigureIntent{}, fmt.Errorf("configure intent: %w", err)
	}
	if x.Since != "" {
		if c.Since, err = time.Parse(time.RFC3339Nano, x.Since); err != nil {
			return ConfigureIntent{}, fmt.Errorf("decode metadata: configure intent since: %w", err)
		}
	}
	return c, nil
}

// decodeDelete is strict too: an intent without an operation id, or with
// a time that does not parse, is damage, never "no Delete begun".
func decodeDelete(x *xmlDelete) (DeleteIntent, error) {
	if x == nil {
		return DeleteIntent{}, nil
	}
	op, err := x.Operation.decode()
	if err != nil {
		return DeleteIntent{}, fmt.Errorf("decode metadata: delete intent operation: %w", err)
	}
	if op == "" {
		return DeleteIntent{}, errors.New("decode metadata: delete intent without an operation id")
	}
	d := DeleteIntent{OperationID: op}
	if x.Since != "" {
		if d.Since, err = time.Parse(time.RFC3339Nano, x.Since); err != nil {
			return DeleteIntent{}, fmt.Errorf("decode metadata: delete intent since: %w", err)
		}
	}
	return d, nil
}

// decodeMarks is as strict as the rest: a mark without a shard id, epoch
// or sequence, or a shard twice is an error, so a damaged element never
// passes for a (lower) mark. Negative parts are ordinary int64 values.
func decodeMarks(xs []xmlMark) (map[string]backend.FenceMark, error) {
	if len(xs) == 0 {
		return nil, nil
	}
	out := make(map[string]backend.FenceMark, len(xs))
	for i, x := range xs {
		shard, err := x.Shard.decode()
		switch {
		case err != nil:
			return nil, fmt.Errorf("decode metadata: fence mark %d shard: %w", i, err)
		case shard == "":
			return nil, fmt.Errorf("decode metadata: fence mark %d: no shard id", i)
		case x.Epoch == nil || x.Sequence == nil:
			return nil, fmt.Errorf("decode metadata: fence mark %d: epoch or sequence missing", i)
		}
		if _, dup := out[shard]; dup {
			return nil, fmt.Errorf("decode metadata: fence mark for shard %q twice", shard)
		}
		out[shard] = backend.FenceMark{Epoch: *x.Epoch, Sequence: *x.Sequence}
	}
	return out, nil
}

// MergeMarks returns the newer mark of each shard in a and b, comparing
// (epoch, sequence) in order: a recorded mark is never lowered, whatever
// the order in which writers arrive. nil when both are empty.
func MergeMarks(a, b map[string]backend.FenceMark) map[string]backend.FenceMark {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := make(map[string]backend.FenceMark, len(a)+len(b))
	for _, src := range []map[string]backend.FenceMark{a, b} {
		for k, m := range src {
			if cur, ok := out[k]; !ok || m.Epoch > cur.Epoch || (m.Epoch == cur.Epoch && m.Sequence > cur.Sequence) {
				out[k] = m
			}
		}
	}
	return out
}

func decodeShard(entries []xmlEntry) (map[string]string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(entries))
	for i, e := range entries {
		k, err := e.Key.decode()
		if err != nil {
			return nil, fmt.Errorf("decode metadata: shard entry %d key: %w", i, err)
		}
		v, err := e.Value.decode()
		if err != nil {
			return nil, fmt.Errorf("decode metadata: shard entry %d value: %w", i, err)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("decode metadata: shard key %q twice", k)
		}
		out[k] = v
	}
	return out, nil
}
