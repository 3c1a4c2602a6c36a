// Command libvirt is the BigFleet CapacityProvider for libvirt hosts.
//
// It parses flags (names compatible with the reference provider), builds
// the capacity model, the state store, the backend (libvirt, or the fake
// substrate on explicit request) and the lifecycle engine, and serves them
// with package server until SIGTERM/SIGINT, when it turns not-ready, drains
// in-flight RPCs and closes the engine and the store. Run with --help for
// every flag.
package main
