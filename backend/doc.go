// Package backend is the substrate vocabulary shared by the lifecycle engine
// and the substrates that carry out its transitions (the libvirt backend and
// the in-memory fake). It knows nothing of protos or Connect: the engine maps
// its own records to these specs, and each backend reports back with plain
// values and the sentinel errors below.
package backend
