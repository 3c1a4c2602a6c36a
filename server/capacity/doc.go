// Package capacity is the provider's capacity model: the instance-type
// catalog, the offerings (instance type × zone × capacity type × count),
// their prices, and the deterministic SPECULATIVE slots the lifecycle engine
// seeds from them.
//
// It is proto-free and does no flag parsing: cmd fills a Config (and uses
// ParsePrices / ParseCapacityType for the string flags), then calls Load.
// Every input is validated at startup with messages naming the offending
// entry and field, so a bad file stops the process instead of seeding junk.
//
// Machine ids are a pure function of (zone, instance type, capacity type,
// index), see MachineID: growing an offering adds exactly the new slots and
// a restart never duplicates one.
package capacity
