package record

import (
	"maps"
	"slices"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// State is a machine's lifecycle state. The numbering follows the wire enum
// so mapping is a cast, but nothing here depends on the proto package.
type State int32

const (
	StateUnspecified State = iota
	Speculative
	Creating
	Idle
	Configuring
	Configured
	Draining
	Deleting
	Failed
)

var stateNames = [...]string{"UNSPECIFIED", "SPECULATIVE", "CREATING", "IDLE",
	"CONFIGURING", "CONFIGURED", "DRAINING", "DELETING", "FAILED"}

func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return "UNKNOWN"
	}
	return stateNames[s]
}

// AllStates lists every real state, in wire order.
var AllStates = []State{Speculative, Creating, Idle, Configuring, Configured, Draining, Deleting, Failed}

// CapacityType follows the wire enum numbering.
type CapacityType int32

const (
	CapacityUnspecified CapacityType = iota
	CapacityBareMetal
	CapacityReserved
	CapacityOnDemand
	CapacitySpot
)

// OpKind names a transition (the RPC that started it).
type OpKind string

const (
	OpNone      OpKind = ""
	OpCreate    OpKind = "create"
	OpConfigure OpKind = "configure"
	OpDrain     OpKind = "drain"
	OpDelete    OpKind = "delete"
	OpReconcile OpKind = "reconcile"
	OpRelease   OpKind = "release"
	// OpMigrate is never a machine's OpKind: a live migration keeps the
	// machine's state and operation id, and only appears in its history.
	OpMigrate OpKind = "migrate"
	// OpFenceClear is never a machine's OpKind either: an operator's
	// removal of a shard's fence mark (issue 39), in its history only.
	OpFenceClear OpKind = "fence-clear"
)

// HostRef is where a machine's VM lives; zero means "no host".
type HostRef struct {
	Provider string `json:"provider,omitempty"`
	Ref      string `json:"ref,omitempty"`
}

// Transition is one entry of a machine's bounded history.
type Transition struct {
	OperationID string    `json:"op"`
	Kind        OpKind    `json:"kind"`
	From        State     `json:"from"`
	To          State     `json:"to"` // the state it ended in (or the target while running)
	Started     time.Time `json:"started"`
	Ended       time.Time `json:"ended,omitzero"`
	Outcome     string    `json:"outcome"` // running, succeeded, failed, timed_out, rolled_back, superseded
	LastError   string    `json:"last_error,omitempty"`
	// Note says why the transition went as it did when the backend chose
	// something: a Create's placement decision and its reason.
	Note string `json:"note,omitempty"`
}

// HistoryLimit bounds the transitions kept per machine.
const HistoryLimit = 32

// Machine is the engine's record of one slot. Values are treated as
// immutable once published: every change builds a new copy (Clone).
type Machine struct {
	ID                      string            `json:"id"`
	State                   State             `json:"state"`
	Host                    HostRef           `json:"host,omitzero"`
	InstanceType            string            `json:"instance_type"`
	Zone                    string            `json:"zone"`
	CapacityType            CapacityType      `json:"capacity_type"`
	PricePerHour            float64           `json:"price"`
	InterruptionProbability float64           `json:"interruption,omitempty"`
	Resources               map[string]string `json:"resources,omitempty"`
	Allocatable             map[string]string `json:"allocatable,omitempty"`
	Labels                  map[string]string `json:"labels,omitempty"`
	LastError               string            `json:"last_error,omitempty"`
	Cluster                 string            `json:"cluster,omitempty"`
	ShardMetadata           map[string]string `json:"shard_metadata,omitempty"`

	// Hardware of the instance type, handed to the backend on Create.
	VCPU      int `json:"vcpu"`
	MemoryMiB int `json:"memory_mib"`

	// Bookkeeping.
	Domain      string       `json:"domain,omitempty"`
	HostName    string       `json:"host_name,omitempty"` // the hypervisor within the zone ("" before zones had several)
	OperationID string       `json:"op,omitempty"`        // the current or last transition
	OpKind      OpKind       `json:"op_kind,omitempty"`   // kind of that transition
	OpDeadline  time.Time    `json:"op_deadline,omitzero"`
	DrainGrace  int64        `json:"drain_grace,omitempty"`
	StateSince  time.Time    `json:"since,omitzero"`
	Revision    uint64       `json:"rev"`
	History     []Transition `json:"history,omitempty"`

	// encoding caches the record's wire encoding (see Encoded). The index gives
	// every record a fresh one as it is published; copies (Clone, Edit)
	// drop it, so an edited copy can never serve its original's bytes.
	encoding *encodingCache
}

// Placement is where the backend put the machine's VM (zero fields when
// it has none yet).
func (m *Machine) Placement() backend.Placement {
	return backend.Placement{Zone: m.Zone, Host: m.HostName, Domain: m.Domain}
}

// Clone returns a deep copy, so a published record never aliases a caller's
// maps or a later edit. The engine hands deep copies across its API (Get,
// acks, watch); inside, records share their maps (see Edit).
func (m Machine) Clone() Machine {
	c := m
	c.encoding = nil
	c.Resources = maps.Clone(m.Resources)
	c.Allocatable = maps.Clone(m.Allocatable)
	c.Labels = maps.Clone(m.Labels)
	c.ShardMetadata = maps.Clone(m.ShardMetadata)
	c.History = append([]Transition(nil), m.History...)
	return c
}

// Token is BigFleet's fencing token. The zero Token means "no token".
type Token struct {
	ShardID  string
	Epoch    int64
	Sequence int64
}

// Mark is the highest accepted (epoch, sequence) of a (shard, machine).
type Mark struct {
	Epoch    int64 `json:"e"`
	Sequence int64 `json:"s"`
}

// MarkKey identifies a fence mark.
type MarkKey struct {
	ShardID   string
	MachineID string
}

// CreateRequest and friends are the engine's view of the mutating RPCs.
type CreateRequest struct {
	MachineID string
	Token     Token
}

type ConfigureRequest struct {
	MachineID     string
	ClusterID     string
	BootstrapBlob []byte
	ShardMetadata map[string]string
	Token         Token
}

type DrainRequest struct {
	MachineID    string
	GraceSeconds int64
	Token        Token
}

type DeleteRequest struct {
	MachineID string
	Token     Token
}

// Ack answers an accepted (or idempotently retried) mutation.
type Ack struct {
	OperationID string
	Machine     Machine
}

// ListQuery selects machines; Since is an opaque cursor from a ListResult.
type ListQuery struct {
	States     []State
	MaxResults int
	Since      []byte
}

// ListResult is one page and the cursor to continue from.
type ListResult struct {
	Machines []Machine
	Revision []byte
}

// Edit returns a copy to build the next version of a record from. Maps are
// shared: the engine never writes into a record's map, it only replaces
// whole maps, so sharing them between versions (and between the slots of
// one offering) is safe and keeps a large fleet's memory small. History is
// shared too, capped so that an append copies it (AppendHistory), and an
// entry is changed only through LastTransition, which copies it first: a
// full history is 32 entries (~5 KiB), and copying it on every edit was the
// largest allocation of an accepted mutation.
func (m Machine) Edit() Machine {
	c := m
	c.encoding = nil
	c.History = m.History[:len(m.History):len(m.History)]
	return c
}

// LastTransition returns the newest history entry of a record being built
// (an edit), on a copy of the history it may change; nil when it has none.
func (m *Machine) LastTransition() *Transition {
	if len(m.History) == 0 {
		return nil
	}
	m.History = slices.Clone(m.History)
	return &m.History[len(m.History)-1]
}

// Transitional reports whether s is one of the four states a transition
// runs through (CREATING, CONFIGURING, DRAINING, DELETING).
func (s State) Transitional() bool {
	switch s {
	case Creating, Configuring, Draining, Deleting:
		return true
	}
	return false
}

// CloneMap copies m (nil when it is empty).
func CloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// AppendHistory adds t to a history being built (an Edit), keeping at most
// HistoryLimit entries, and never writes into the array h shares with the
// published record.
func AppendHistory(h []Transition, t Transition) []Transition {
	if len(h) < HistoryLimit {
		return append(h[:len(h):len(h)], t) // a new array, whoever shares h's
	}
	// Full: one new slice of the newest entries (never the shared array of
	// the published record; see Edit).
	out := make([]Transition, HistoryLimit)
	copy(out, h[len(h)-HistoryLimit+1:])
	out[HistoryLimit-1] = t
	return out
}
