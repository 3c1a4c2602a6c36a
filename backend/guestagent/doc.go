// Package guestagent speaks the qemu-guest-agent (qemu-ga) protocol over a
// small Transport interface and runs the image's bootstrap, readiness and
// drain hooks through it.
//
// Trust model: the provider reaches a guest only through the agent's
// virtio-serial channel (org.qemu.guest_agent.0). There is no SSH and no
// inbound port, so nothing in this package opens a network connection.
//
// The package has no libvirt import. The libvirt backend implements Transport
// with dom.QemuAgentCommand(cmd, timeoutSeconds, 0); tests use a scripted fake.
//
// Layers:
//   - Client: one typed method per agent command (guest-ping, guest-sync,
//     guest-file-open/write/close, guest-exec, guest-exec-status), each bounded
//     by a per-command timeout.
//   - Helpers on Client: WaitReady, WriteFile (chunked) and RunHook (exec +
//     status polling with backoff + kill on overrun).
//   - Bootstrapper: Configure and Drain as the image contract in
//     docs/image-contract.md describes them.
//   - Guest-side bookkeeping (guestside.go): the blob goes to a 0600 file in
//     a private directory and is renamed into place; hooks run as their own
//     process group with a pid record in the guest, so a transition can
//     kill what one interrupted by a provider crash left running.
//
// Errors: ErrAgentUnavailable marks "the agent did not answer" (timeouts,
// unreachable channel); *AgentError marks "the agent answered with an error".
// The bootstrap blob is opaque and never appears in an error or a log.
package guestagent
