// Package serial holds the engine's per-machine serialisation: the lock of
// a machine id (Keyed), the gate that lets one backend call per machine
// run at a time even after a timeout (CallGate), the live transition runs
// by operation id (RunSet), and the holds of live migrations (MoveHolds).
package serial
