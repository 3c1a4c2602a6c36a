// Package server puts the lifecycle engine on the wire: Connect handlers for
// bigfleet.v1alpha1.CapacityProvider (served as gRPC, gRPC-Web and Connect
// JSON/binary at once), the proto↔engine mapping, the single error→code
// mapping, interceptors (request id, logs, Prometheus metrics, panic
// recovery), grpc.health.v1 and reflection, the listener with its TLS modes,
// and the metrics/readiness server.
//
// Nothing here knows about libvirt or the store's format; package
// cmd/libvirt wires the pieces together.
package server
