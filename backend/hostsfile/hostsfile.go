// Package hostsfile reads the --hosts file: the hypervisors of each zone,
// with their URI, labels, overcommit ratios and cordon flag. Decoding is
// strict: an unknown key, a missing field or a bad value is an error that
// names the file, the line and the key, so an operator can fix it at once.
package hostsfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Host is one hypervisor of the file.
type Host struct {
	Name       string            `yaml:"name"`
	Zone       string            `yaml:"zone"`
	URI        string            `yaml:"uri"`
	Labels     map[string]string `yaml:"labels"`
	Overcommit Overcommit        `yaml:"overcommit"`
	Cordoned   bool              `yaml:"cordoned"`
	// Fake sizes the host for the fake backend; nil when the file has no
	// fake: block (the real backend reads the host's size from libvirt).
	Fake *Fake `yaml:"fake"`
	// Line is where the host's entry starts in the file, for messages.
	Line int `yaml:"-"`
}

// Overcommit ratios: placeable vCPUs = VCPUs × CPU, MiB = MemoryMiB × Memory.
type Overcommit struct {
	CPU    float64 `yaml:"cpu"`
	Memory float64 `yaml:"memory"`
}

// Fake is the size a fake host pretends to have.
type Fake struct {
	VCPUs     int   `yaml:"vcpus"`
	MemoryMiB int64 `yaml:"memory_mib"`
	PoolGiB   int64 `yaml:"pool_gib"`
}

// Default size of a fake host without a fake: block, and default ratios.
const (
	DefaultFakeVCPUs     = 64
	DefaultFakeMemoryMiB = 256 * 1024
	DefaultFakePoolGiB   = 1024
	DefaultOvercommit    = 1.0
)

// File is the decoded --hosts file.
type File struct {
	Path  string
	Hosts []Host
}

// allowed keys per level, in the order the docs list them.
var (
	topKeys        = []string{"hosts"}
	hostKeys       = []string{"name", "zone", "uri", "labels", "overcommit", "cordoned", "fake"}
	overcommitKeys = []string{"cpu", "memory"}
	fakeKeys       = []string{"vcpus", "memory_mib", "pool_gib"}
)

var (
	nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	zoneRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

// Load reads and parses the file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--hosts: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes and validates data; path only names the file in messages.
// Every problem found is reported, joined.
func Parse(path string, data []byte) (*File, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("--hosts %s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, fmt.Errorf("--hosts %s: empty file: want a hosts: list", path)
	}
	if err := checkKeys(path, doc.Content[0]); err != nil {
		return nil, err
	}
	var f struct {
		Hosts []Host `yaml:"hosts"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true) // a safety net behind checkKeys
	if err := dec.Decode(&f); err != nil {
		return nil, decodeError(path, err)
	}
	items := hostNodes(doc.Content[0])
	for i := range f.Hosts {
		if i < len(items) {
			f.Hosts[i].Line = items[i].Line
		}
	}
	out := &File{Path: path, Hosts: f.Hosts}
	if err := out.validate(); err != nil {
		return nil, err
	}
	return out, nil
}

// checkKeys walks the tree and refuses unknown keys and misshapen levels,
// naming the line and the key.
func checkKeys(path string, top *yaml.Node) error {
	at := func(n *yaml.Node, format string, args ...any) error {
		return fmt.Errorf("--hosts %s:%d: %s", path, n.Line, fmt.Sprintf(format, args...))
	}
	if top.Kind != yaml.MappingNode {
		return at(top, "want a mapping with a hosts: list at the top")
	}
	var errs []error
	mapping := func(n *yaml.Node, where string, allowed []string, each func(key string, val *yaml.Node)) {
		if n.Kind != yaml.MappingNode {
			errs = append(errs, at(n, "%s: want a mapping", where))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if !slices.Contains(allowed, k.Value) {
				errs = append(errs, at(k, "unknown key %q in %s (allowed: %s)", k.Value, where, strings.Join(allowed, ", ")))
				continue
			}
			if each != nil {
				each(k.Value, v)
			}
		}
	}
	mapping(top, "the top level", topKeys, func(key string, v *yaml.Node) {
		if v.Kind != yaml.SequenceNode {
			errs = append(errs, at(v, "hosts: want a list of hosts"))
			return
		}
		for _, item := range v.Content {
			mapping(item, "a host", hostKeys, func(key string, v *yaml.Node) {
				switch key {
				case "overcommit":
					mapping(v, "overcommit", overcommitKeys, nil)
				case "fake":
					mapping(v, "fake", fakeKeys, nil)
				}
			})
		}
	})
	return errors.Join(errs...)
}

// hostNodes returns the nodes of the hosts: list's items (for their lines).
func hostNodes(top *yaml.Node) []*yaml.Node {
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "hosts" {
			return top.Content[i+1].Content
		}
	}
	return nil
}

// decodeError turns yaml's "line N: cannot unmarshal ..." list into one
// "--hosts FILE:N: ..." line per problem.
func decodeError(path string, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("--hosts %s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	errs := make([]error, 0, len(te.Errors))
	for _, e := range te.Errors {
		line, rest, ok := strings.Cut(strings.TrimPrefix(e, "line "), ": ")
		if !ok {
			errs = append(errs, fmt.Errorf("--hosts %s: %s", path, e))
			continue
		}
		errs = append(errs, fmt.Errorf("--hosts %s:%s: %s", path, line, rest))
	}
	return errors.Join(errs...)
}
