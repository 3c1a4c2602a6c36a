package intents

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Content is what the journal holds.
type Content struct {
	// Creating are the machines in CREATING, by id: accepted Creates whose
	// domain may not be defined yet (so no host can tell of them).
	Creating map[string]record.Machine
	// Marks are every fence mark, those of machines without a domain
	// included (a domain's metadata holds only the marks its last
	// metadata write saw).
	Marks map[record.MarkKey]record.Mark
	// Hosts are the admin API's host files by kind (HostCordons,
	// HostDowns), verbatim.
	Hosts map[string][]byte
}

// The kinds of Content.Hosts.
const (
	HostCordons = "cordons"
	HostDowns   = "down"
)

// Empty reports whether c holds nothing.
func (c Content) Empty() bool {
	return len(c.Creating) == 0 && len(c.Marks) == 0 && len(c.Hosts) == 0
}

// clone copies c's maps (the values are immutable: records are never
// edited once committed, marks are plain values, host files are replaced
// whole).
func (c Content) clone() Content {
	out := Content{Creating: maps.Clone(c.Creating), Marks: maps.Clone(c.Marks), Hosts: maps.Clone(c.Hosts)}
	if out.Creating == nil {
		out.Creating = map[string]record.Machine{}
	}
	if out.Marks == nil {
		out.Marks = map[record.MarkKey]record.Mark{}
	}
	if out.Hosts == nil {
		out.Hosts = map[string][]byte{}
	}
	return out
}

// contentV1 is the wire form, gzipped JSON. Marks are grouped by machine
// then shard, [epoch, sequence]: each id is written once, which keeps
// 8000 slots' marks small.
type contentV1 struct {
	Version  int                        `json:"version"`
	Creating []record.Machine           `json:"creating"`
	Marks    marksV1                    `json:"marks"`
	Hosts    map[string]json.RawMessage `json:"hosts,omitempty"`
}

const contentVersion = 1

// maxDecoded bounds what decode inflates: a ConfigMap holds at most 1 MiB,
// and the JSON of marks compresses about tenfold; far more is not ours.
const maxDecoded = 64 << 20

// encode is c's wire form.
func encode(c Content) ([]byte, error) {
	v := contentV1{Version: contentVersion, Creating: make([]record.Machine, 0, len(c.Creating)),
		Marks: marksV1(c.Marks)}
	for _, id := range sortedKeys(c.Creating) {
		v.Creating = append(v.Creating, c.Creating[id])
	}
	if len(c.Hosts) > 0 {
		v.Hosts = map[string]json.RawMessage{}
		for kind, data := range c.Hosts {
			if !json.Valid(data) {
				return nil, fmt.Errorf("intents: host file %q is not JSON", kind)
			}
			v.Hosts[kind] = json.RawMessage(data)
		}
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err := json.NewEncoder(zw).Encode(v); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decode reads a wire form; nil or empty is the empty journal. Anything
// it cannot read faithfully is an error: a takeover must not act on a
// journal it half understood.
func decode(b []byte) (Content, error) {
	c := Content{}.clone()
	if len(b) == 0 {
		return c, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return Content{}, fmt.Errorf("intents: journal is not gzip: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxDecoded+1))
	if err != nil {
		return Content{}, fmt.Errorf("intents: journal: %w", err)
	}
	if len(raw) > maxDecoded {
		return Content{}, errors.New("intents: journal inflates past 64 MiB")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var v contentV1
	if err := dec.Decode(&v); err != nil {
		return Content{}, fmt.Errorf("intents: journal: %w", err)
	}
	if v.Version != contentVersion {
		return Content{}, fmt.Errorf("intents: journal version %d, this provider reads version %d", v.Version, contentVersion)
	}
	for _, m := range v.Creating {
		if m.ID == "" || m.State != record.Creating {
			return Content{}, fmt.Errorf("intents: journal entry %q in %s, not a machine in CREATING", m.ID, m.State)
		}
		c.Creating[m.ID] = m
	}
	maps.Copy(c.Marks, v.Marks)
	for kind, data := range v.Hosts {
		c.Hosts[kind] = []byte(data)
	}
	return c, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
