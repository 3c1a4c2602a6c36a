package guestagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bigfleet/libvirt-provider/backend"
)

// TestAgentLostMidProtocolIsTransient: an agent that answered and then
// stops answering part-way (libvirtd frozen or restarted under us) is a
// transient fault the engine retries; an agent that never answered stays
// a final failure that says the guest may not have booted.
func TestAgentLostMidProtocolIsTransient(t *testing.T) {
	t.Parallel()
	lost := func(cmd string) func(string, json.RawMessage) ([]byte, error, bool) {
		return func(c string, _ json.RawMessage) ([]byte, error, bool) {
			if c == cmd {
				return nil, fmt.Errorf("End of file while reading data: %w", ErrAgentUnavailable), true
			}
			return nil, nil, false
		}
	}
	for _, cmd := range []string{"guest-file-write", "guest-exec", "guest-exec-status"} {
		t.Run("configure/"+cmd, func(t *testing.T) {
			t.Parallel()
			b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
			g.override = lost(cmd)
			err := b.Configure(t.Context(), cluster, []byte("blob"))
			if !errors.Is(err, backend.ErrTransient) || !IsAgentUnavailable(err) {
				t.Fatalf("err = %v, want transient and agent-unavailable", err)
			}
		})
	}
	t.Run("drain", func(t *testing.T) {
		t.Parallel()
		b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
		g.programs[DefaultDrainHook] = fixed(proc{})
		g.override = lost("guest-exec")
		if err := b.Drain(t.Context(), cluster, time.Second); !errors.Is(err, backend.ErrTransient) {
			t.Fatalf("err = %v, want transient", err)
		}
	})
	t.Run("never answered", func(t *testing.T) {
		t.Parallel()
		b, g, _ := newTestBootstrapper(t, BootstrapConfig{AgentWait: 30 * time.Second})
		g.override = func(string, json.RawMessage) ([]byte, error, bool) {
			return nil, fmt.Errorf("Guest agent is not responding: %w", ErrAgentUnavailable), true
		}
		err := b.Configure(t.Context(), cluster, []byte("blob"))
		if err == nil || errors.Is(err, backend.ErrTransient) {
			t.Fatalf("err = %v, want a final (not transient) failure", err)
		}
	})
	t.Run("hook failure", func(t *testing.T) {
		t.Parallel()
		b, g, _ := newTestBootstrapper(t, BootstrapConfig{})
		g.programs[DefaultBootstrapHook] = fixed(proc{Exit: 3, Stderr: "bad token"})
		if err := b.Configure(t.Context(), cluster, []byte("blob")); err == nil || errors.Is(err, backend.ErrTransient) {
			t.Fatalf("err = %v, want a final failure", err)
		}
	})
}
