// Package fence holds BigFleet's fencing rule (a token passes when its
// (epoch, sequence) is lexicographically newer than its mark) and the two
// tables of marks: the durable marks of existing machines, indexed by
// machine, and the bounded in-memory marks of ids that do not exist; and
// the Keeper, the engine's fence over them: it checks a token, decides
// where a passing token's mark goes, bounds the shards on a machine and
// restores marks a host recorded. The engine calls it under the machine's
// lock and lends it the three-method Machines (exists, lock, commit).
package fence
