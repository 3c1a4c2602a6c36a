// Package fence holds BigFleet's fencing rule (a token passes when its
// (epoch, sequence) is lexicographically newer than its mark) and the two
// tables of marks: the durable marks of existing machines, indexed by
// machine, and the bounded in-memory marks of ids that do not exist. The
// engine checks tokens against them under the machine's lock.
package fence
