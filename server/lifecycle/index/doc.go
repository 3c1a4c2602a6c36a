// Package index is the engine's read model: the published machine records
// by id, the revision log behind incremental List and its cursors, the
// counts by state and zone, the watchers, and the interner that lets a
// fleet's records share their maps. Records are published strictly in
// revision order; the index never calls the engine.
package index
