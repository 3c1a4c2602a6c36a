// Package guestfit decides whether a host's QEMU can run a guest that
// already runs elsewhere: the guest's machine type (the exact versioned
// one its definition names, e.g. pc-i440fx-10.0, or an alias such as pc)
// and its CPU (mode and named model). A live migration needs both on the
// destination: QEMU 7.2 has no pc-i440fx-10.0, and a guest's CPU model
// cannot change under it. The answers come from the host's capabilities
// and domain capabilities (Cache reads them once per connection). It
// needs no Backend and knows nothing of placement.
package guestfit
