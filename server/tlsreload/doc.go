// Package tlsreload serves the gRPC listener's certificate, key and client
// CA from files that may change while the process runs (a Kubernetes Secret
// volume is updated in place by the kubelet).
//
// A Reloader loads the files once at startup (an error then refuses the
// start), then polls them. When their content changes it parses and checks
// the new material and, only if it is usable, swaps it in atomically: every
// TLS handshake after that uses the new certificate and, for mTLS, verifies
// client certificates against the new CA bundle. Connections already
// established keep the material they were set up with.
//
// A broken update (unparseable PEM, a key that does not match the
// certificate, an expired certificate, a CA file with no certificate or
// with a block that is not one, a file missing halfway through a
// rotation) never replaces the last good
// material: the Reloader keeps serving it and logs why, once per distinct
// bad content, and tries again on the next poll.
//
// The package has no dependency on the rest of the server; it is used only
// through server.TLSFiles.Load, the one TLS builder of production and tests.
package tlsreload
