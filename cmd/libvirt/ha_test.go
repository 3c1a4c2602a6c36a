package main

import (
	"io"
	"strings"
	"testing"
)

// TestLeaderFlagRefusals: leader-election settings that cannot work stop
// the process at startup, naming the flag to change.
func TestLeaderFlagRefusals(t *testing.T) {
	t.Setenv("POD_NAME", "pod-a")
	le := []string{"--use-fake-backend", "--leader-elect", "--kubeconfig=/nonexistent"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		// The default libvirt call bound (30s) does not fit in the
		// default margin (15s - 10s).
		{le, "--libvirt-call-timeout 30s does not fit"},
		{append(le, "--libvirt-call-timeout=4s", "--leader-elect-renew=15s"), "--leader-elect-renew 15s must be shorter than --leader-elect-lease"},
		{append(le, "--libvirt-call-timeout=4s", "--leader-elect-retry=10s"), "--leader-elect-retry"},
		{append(le, "--libvirt-call-timeout=4s", "--leader-elect-lease-name="), "--leader-elect-lease-name"},
		{[]string{"--use-fake-backend", "--kubeconfig=/x"}, "need --leader-elect"},
	} {
		err := run(t.Context(), tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want %q", tc.args, err, tc.want)
		}
	}
}

// TestLeaderElectNeedsAPI: with valid timings but no reachable API
// configuration, the process stops at startup naming --kubeconfig.
func TestLeaderElectNeedsAPI(t *testing.T) {
	t.Setenv("POD_NAME", "pod-a")
	err := run(t.Context(), []string{"--use-fake-backend", "--leader-elect", "--libvirt-call-timeout=4s",
		"--kubeconfig=/nonexistent", "--addr=127.0.0.1:0", "--metrics-addr="}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--kubeconfig /nonexistent") {
		t.Fatalf("%v; want a refusal naming --kubeconfig", err)
	}
}
