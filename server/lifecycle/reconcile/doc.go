// Package reconcile compares what the hosts hold with the engine's
// records: a pass lists each zone (streamed as its hosts answer), restores
// the fence marks the hosts recorded, adopts our own domains under
// SPECULATIVE records, relocates or vanishes machines, removes provable
// spare copies of a machine, recovers migrations cut by a restart, and
// restarts stopped IDLE domains with backoff. It also keeps the record of
// the zones listed since start, which the engine's accept path waits on.
//
// It reaches the engine only through the narrow Engine interface: records
// are read with Get and changed with Update (the engine's one way to change
// a record), backend calls on a machine go through EnterCall.
package reconcile
