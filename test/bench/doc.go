// Package bench measures the provider end to end: it launches the real
// bin/libvirt binary (fake backend, bbolt --state) and drives it with
// grpc-go clients, as BigFleet's shards do. Run with `make bench`; the
// numbers go to docs/benchmarks.md.
package bench
