package lifecycle

import (
	"context"

	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

// update is the one way a record changes outside the accept path (which
// commits a fence mark with it, see mutateWith). Under the machine's lock
// it checks that the record is still the one the caller read (expect),
// builds the next version from a copy (edit), then commits and publishes
// it. It returns the committed record (published: read only),
// record.ErrStale when the record is not the one expected or is gone,
// edit's error (record.ErrUnchanged: nothing to change), or the commit's.
func (e *Engine) update(id string, expect record.Expect, edit record.Edit) (*record.Machine, error) {
	unlock := e.locks.Lock(id)
	defer unlock()
	cur, ok := e.idx.Get(id)
	if !ok || !expect.Matches(cur) {
		return nil, errStale
	}
	n := cur.Edit()
	if err := edit(cur, &n); err != nil {
		return nil, err
	}
	if err := e.commit(context.Background(), id, "", nil, &n); err != nil {
		return nil, err
	}
	return &n, nil
}
