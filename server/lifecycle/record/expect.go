package record

import "errors"

// ErrStale says a change was not made because the record is no longer the
// one its caller read (another operation, another revision, or gone).
var ErrStale = errors.New("operation no longer current")

// ErrUnchanged is what an edit returns when the record needs no change:
// nothing is committed.
var ErrUnchanged = errors.New("record unchanged")

// Expect says which record a change may apply to: the one the caller read.
// Zero fields are not checked.
type Expect struct {
	// OperationID, when set, must be the record's operation id: a new
	// transition since the read makes the change stale.
	OperationID string
	// Revision, when set, must be the record's revision: any change since
	// the read makes it stale.
	Revision uint64
	// Holds, when set, must hold of the record as well.
	Holds func(cur *Machine) bool
}

// Matches reports whether cur is the record x expects.
func (x Expect) Matches(cur *Machine) bool {
	return (x.OperationID == "" || cur.OperationID == x.OperationID) &&
		(x.Revision == 0 || cur.Revision == x.Revision) &&
		(x.Holds == nil || x.Holds(cur))
}

// Edit builds the next version of a record: next starts as a copy of cur
// (Machine.Edit) and edit changes it, appending its history entry itself;
// cur is the published record, read only. Returning ErrUnchanged (or any
// error) commits nothing.
type Edit func(cur, next *Machine) error
