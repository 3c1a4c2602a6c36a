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
	"sync"
	"time"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// Content is what the journal holds.
type Content struct {
	// Transitional are the machines in a transitional state (CREATING,
	// CONFIGURING, DRAINING, DELETING), by id: operations accepted and not
	// ended, which the hosts may know nothing of (a Create whose domain is
	// not defined yet, a Configure, Drain or Delete that left no trace on
	// its domain yet). The new leader resumes each by the restart rules.
	Transitional map[string]record.Machine
	// Ended are machines whose last transition ended recently (at most
	// MaxEnded, none older than EndedFor), as last committed: the new
	// leader keeps their operation ids, so a shard's replay of a Drain or
	// Delete the old leader finished is answered with its operation id,
	// not refused because the rebuilt record forgot it (a deleted machine
	// has no domain to tell, a drained one's domain not the kind of its
	// last operation).
	Ended map[string]record.Machine
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
	return len(c.Transitional) == 0 && len(c.Ended) == 0 && len(c.Marks) == 0 && len(c.Hosts) == 0
}

// clone copies c's maps (the values are immutable: records are never
// edited once committed, marks are plain values, host files are replaced
// whole).
func (c Content) clone() Content {
	out := Content{Transitional: maps.Clone(c.Transitional), Ended: maps.Clone(c.Ended), Marks: maps.Clone(c.Marks), Hosts: maps.Clone(c.Hosts)}
	if out.Transitional == nil {
		out.Transitional = map[string]record.Machine{}
	}
	if out.Ended == nil {
		out.Ended = map[string]record.Machine{}
	}
	if out.Marks == nil {
		out.Marks = map[record.MarkKey]record.Mark{}
	}
	if out.Hosts == nil {
		out.Hosts = map[string][]byte{}
	}
	return out
}

// The wire form is one ConfigMap's binaryData, each value gzipped JSON:
// Key holds the version, the transitional records and the host files, and
// MarkBuckets keys ("marks-00.json.gz" …) hold the marks, each those of
// the machines whose id hashes to it. Every write re-encodes Key (small)
// and only the buckets whose marks changed: the marks of 8000 slots take
// ~10 ms to encode, one bucket a sixteenth of that. An empty bucket is
// absent.
type contentV1 struct {
	Version      int                        `json:"version"`
	Transitional []record.Machine           `json:"transitional"`
	Ended        []record.Machine           `json:"ended,omitempty"`
	Hosts        map[string]json.RawMessage `json:"hosts,omitempty"`
}

const contentVersion = 1

// MarkBuckets is how many keys the marks are spread over.
const MarkBuckets = 16

// bucketOf is the bucket of a machine's marks (FNV-1a of its id).
func bucketOf(machineID string) int {
	h := uint32(2166136261)
	for i := 0; i < len(machineID); i++ {
		h = (h ^ uint32(machineID[i])) * 16777619
	}
	return int(h % MarkBuckets)
}

func bucketKey(b int) string { return fmt.Sprintf("marks-%02d.json.gz", b) }

// maxDecoded bounds what one value inflates to: a ConfigMap holds at most
// 1 MiB, and the JSON of marks compresses about sevenfold; far more is
// not ours.
const maxDecoded = 64 << 20

// encode is c's whole wire form.
func encode(c Content) (map[string][]byte, error) {
	parts := map[string][]byte{}
	return parts, encodeInto(parts, c, nil)
}

// encodeInto re-encodes Key and the buckets in dirty (all when nil) of
// c into parts, leaving the other buckets as they are.
func encodeInto(parts map[string][]byte, c Content, dirty map[int]bool) error {
	v := contentV1{Version: contentVersion, Transitional: make([]record.Machine, 0, len(c.Transitional))}
	for _, id := range sortedKeys(c.Transitional) {
		v.Transitional = append(v.Transitional, c.Transitional[id])
	}
	for _, id := range sortedKeys(c.Ended) {
		v.Ended = append(v.Ended, c.Ended[id])
	}
	if len(c.Hosts) > 0 {
		v.Hosts = map[string]json.RawMessage{}
		for kind, data := range c.Hosts {
			if !json.Valid(data) {
				return fmt.Errorf("intents: host file %q is not JSON", kind)
			}
			v.Hosts[kind] = json.RawMessage(data)
		}
	}
	main, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if parts[Key], err = gz(main); err != nil {
		return err
	}
	buckets := map[int]marksV1{}
	for k, m := range c.Marks {
		b := bucketOf(k.MachineID)
		if dirty != nil && !dirty[b] {
			continue
		}
		if buckets[b] == nil {
			buckets[b] = marksV1{}
		}
		buckets[b][k] = m
	}
	for b := range MarkBuckets {
		if dirty != nil && !dirty[b] {
			continue
		}
		if len(buckets[b]) == 0 {
			delete(parts, bucketKey(b))
			continue
		}
		js, _ := buckets[b].MarshalJSON()
		if parts[bucketKey(b)], err = gz(js); err != nil {
			return err
		}
	}
	return nil
}

// gzWriters are reused: a new writer allocates about a megabyte, more
// than a bucket's whole encoding costs.
var gzWriters = sync.Pool{New: func() any { zw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed); return zw }}

func gz(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzWriters.Get().(*gzip.Writer)
	defer gzWriters.Put(zw)
	zw.Reset(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxDecoded+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxDecoded {
		return nil, errors.New("inflates past 64 MiB")
	}
	return raw, nil
}

// decode reads a wire form; no data is the empty journal. Anything it
// cannot read faithfully is an error: a takeover must not act on a
// journal it half understood.
func decode(parts map[string][]byte) (Content, error) {
	c := Content{}.clone()
	if len(parts) == 0 {
		return c, nil
	}
	for key := range parts {
		if key != Key && !isBucketKey(key) {
			return Content{}, fmt.Errorf("intents: journal key %q is not one this provider writes", key)
		}
	}
	raw, err := gunzip(parts[Key])
	if err != nil {
		return Content{}, fmt.Errorf("intents: journal %s: %w", Key, err)
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
	for _, m := range v.Transitional {
		if m.ID == "" || !m.State.Transitional() {
			return Content{}, fmt.Errorf("intents: journal entry %q in %s, not a machine in a transitional state", m.ID, m.State)
		}
		c.Transitional[m.ID] = m
	}
	for _, m := range v.Ended {
		if _, twice := c.Transitional[m.ID]; m.ID == "" || m.State.Transitional() || twice {
			return Content{}, fmt.Errorf("intents: journal entry %q in %s, not a machine whose transition ended", m.ID, m.State)
		}
		c.Ended[m.ID] = m
	}
	for kind, data := range v.Hosts {
		c.Hosts[kind] = []byte(data)
	}
	for b := range MarkBuckets {
		data, ok := parts[bucketKey(b)]
		if !ok {
			continue
		}
		raw, err := gunzip(data)
		if err != nil {
			return Content{}, fmt.Errorf("intents: journal %s: %w", bucketKey(b), err)
		}
		var ms marksV1
		if err := json.Unmarshal(raw, &ms); err != nil {
			return Content{}, fmt.Errorf("intents: journal %s: %w", bucketKey(b), err)
		}
		for k, m := range ms {
			// Ids are proto strings, valid UTF-8, so they read back as
			// written and hash to the bucket they were written to.
			if bucketOf(k.MachineID) != b {
				return Content{}, fmt.Errorf("intents: journal %s holds machine %q of another bucket", bucketKey(b), k.MachineID)
			}
			c.Marks[k] = m
		}
	}
	return c, nil
}

// How long and how many ended machines the journal keeps (Content.Ended):
// a shard replays a call it got no answer to within its retries, seconds
// to minutes; the bound keeps the journal small (a record is ~1 KB before
// gzip) whatever the churn.
const (
	EndedFor = 15 * time.Minute
	MaxEnded = 256
)

// pruneEnded drops the ended machines older than EndedFor at now, then
// all but the MaxEnded most recent.
func (c Content) pruneEnded(now time.Time) {
	for id, m := range c.Ended {
		if now.Sub(m.StateSince) > EndedFor {
			delete(c.Ended, id)
		}
	}
	if len(c.Ended) <= MaxEnded {
		return
	}
	ids := sortedKeys(c.Ended)
	slices.SortStableFunc(ids, func(a, b string) int { return c.Ended[b].StateSince.Compare(c.Ended[a].StateSince) })
	for _, id := range ids[MaxEnded:] {
		delete(c.Ended, id)
	}
}

func isBucketKey(key string) bool {
	for b := range MarkBuckets {
		if key == bucketKey(b) {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
