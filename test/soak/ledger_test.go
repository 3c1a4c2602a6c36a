//go:build soak

package soak

import "github.com/bigfleet/libvirt-provider/internal/soakkit"

// The ledger and its records are shared with the lab soak (test/soaklab)
// through internal/soakkit; these names keep the local soak's spelling.
type (
	ledger     = soakkit.Ledger
	opRecord   = soakkit.OpRecord
	faultEvent = soakkit.FaultEvent
	binding    = soakkit.Binding
)

// The invariant classes of the closing line, plus "other".
const (
	clOrphan  = soakkit.ClOrphan
	clBinding = soakkit.ClBinding
	clFalse   = soakkit.ClFalse
	clStuck   = soakkit.ClStuck
	clOther   = soakkit.ClOther
)

func newLedger() *ledger { return soakkit.NewLedger() }
