// Package resume ends a Configure cut by a restart (a SIGKILL, a
// failover, a graceful stop that ran out of time, a lost state file) as
// its guest tells. Such a Configure cannot run again: its bootstrap blob
// is never stored. The guest keeps a trace of the bootstrap hook keyed by
// the operation id (backend.ConfigureProber), which decides its end:
//
//   - the hook never started: nothing joined the node, the partial blob
//     is removed, the Configure's intent is cleared from the domain, and
//     the machine rolls back to IDLE (BigFleet's lifecycle allows
//     Configuring → Idle), last_error saying why;
//   - it finished ok: the Configure is finished as it would have been (the
//     ready hook, then the binding) and ends CONFIGURED;
//   - it failed, or started and left no exit status: FAILED with that
//     cause (nobody can tell whether the node joined);
//   - it still runs, or the guest cannot be asked: asked again until
//     --configure-timeout, then FAILED saying what was not learned.
//
// Every end that is not CONFIGURED first removes what the Configure left
// in the guest (backend.Abandoner), so no hook outlives it.
//
// The package decides; the engine records (Outcome). It sees the engine
// only through Engine: the machine's call gate, its fence marks, its
// guest addresses and the guest cleanup.
package resume
