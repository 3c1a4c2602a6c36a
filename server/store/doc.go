// Package store persists the lifecycle engine's state (record.Store).
//
// Two implementations:
//
//   - Memory: a map behind a mutex, for tests and the explicit no-`--state`
//     mode. It deep-copies on Commit and Load, so the engine and the store
//     never share a map or slice.
//   - Bolt: the durable store, one bbolt file with three buckets
//     (meta, machines, marks). Commit returns only once its batch is fsynced;
//     concurrent Commits are coalesced by a single committer goroutine into one
//     transaction and one fsync (group commit), so throughput grows with
//     concurrency while every write stays O(batch), never O(fleet).
//
// The file layout is described in bolt.go and codec.go, and the values of
// machine records and offerings in proto/libvirtprovider/store/v1/store.proto
// (record.go, offering.go; testdata/golden holds values older releases
// wrote, which must keep loading); the file carries a schema
// version in meta so a future layout can refuse or migrate an old file.
package store
