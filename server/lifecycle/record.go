package lifecycle

import (
	"github.com/bigfleet/libvirt-provider/server/lifecycle/fence"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/index"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// The record types live in package record; these aliases keep the engine's
// callers (server, server/admin, server/store, cmd) spelling them
// lifecycle.Machine and so on.
type (
	State            = record.State
	CapacityType     = record.CapacityType
	OpKind           = record.OpKind
	HostRef          = record.HostRef
	Transition       = record.Transition
	Machine          = record.Machine
	Token            = record.Token
	Mark             = record.Mark
	MarkKey          = record.MarkKey
	CreateRequest    = record.CreateRequest
	ConfigureRequest = record.ConfigureRequest
	DrainRequest     = record.DrainRequest
	DeleteRequest    = record.DeleteRequest
	Ack              = record.Ack
	ListQuery        = record.ListQuery
	ListResult       = record.ListResult
	Code             = record.Code
	Error            = record.Error
	Batch            = record.Batch
	Snapshot         = record.Snapshot
	Store            = record.Store

	// StateZone keys the machine counts.
	StateZone = index.StateZone
	// ShardCount is how many distinct shards hold marks on one machine.
	ShardCount = fence.ShardCount
)

const (
	StateUnspecified = record.StateUnspecified
	Speculative      = record.Speculative
	Creating         = record.Creating
	Idle             = record.Idle
	Configuring      = record.Configuring
	Configured       = record.Configured
	Draining         = record.Draining
	Deleting         = record.Deleting
	Failed           = record.Failed

	CapacityUnspecified = record.CapacityUnspecified
	CapacityBareMetal   = record.CapacityBareMetal
	CapacityOnDemand    = record.CapacityOnDemand
	CapacitySpot        = record.CapacitySpot

	OpCreate    = record.OpCreate
	OpConfigure = record.OpConfigure
	OpDrain     = record.OpDrain
	OpDelete    = record.OpDelete
	OpReconcile = record.OpReconcile
	OpRelease   = record.OpRelease
	OpMigrate   = record.OpMigrate
	// OpFenceClear: see record.OpFenceClear.
	OpFenceClear = record.OpFenceClear

	HistoryLimit = record.HistoryLimit

	DefaultShardsPerMachine = fence.DefaultShardsPerMachine
	DefaultUnknownMarkLimit = fence.DefaultUnknownMarkLimit

	CodeInvalid       = record.CodeInvalid
	CodeFenced        = record.CodeFenced
	CodeNotFound      = record.CodeNotFound
	CodeUnimplemented = record.CodeUnimplemented
	CodeAborted       = record.CodeAborted
	CodeUnavailable   = record.CodeUnavailable
	CodePermission    = record.CodePermission
	CodeExhausted     = record.CodeExhausted

	MaxBootstrapBlobBytes   = record.MaxBootstrapBlobBytes
	MaxShardMetadataEntries = record.MaxShardMetadataEntries
	MaxShardMetadataKey     = record.MaxShardMetadataKey
	MaxShardMetadataValue   = record.MaxShardMetadataValue
	MaxShardMetadataBytes   = record.MaxShardMetadataBytes
	MaxClusterIDBytes       = record.MaxClusterIDBytes
	MaxMachineIDBytes       = record.MaxMachineIDBytes
	MaxShardIDBytes         = record.MaxShardIDBytes
)

var (
	// AllStates lists every real state, in wire order.
	AllStates = record.AllStates
	// ErrTooLarge: see record.ErrTooLarge.
	ErrTooLarge = record.ErrTooLarge
)

// Short local names for the record helpers the engine uses everywhere.
var (
	errorf            = record.Errorf
	validateID        = record.ValidateID
	validateToken     = record.ValidateToken
	validateConfigure = record.ValidateConfigure
	appendHistory     = record.AppendHistory
	cloneMap          = record.CloneMap
	noteAddresses     = record.NoteAddresses
)
