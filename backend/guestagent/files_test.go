package guestagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// testBlob is 1 MiB of random bytes with runs of NULs, like a binary blob.
func testBlob() []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	for i := 0; i < len(b); i += 4096 {
		copy(b[i:], make([]byte, 64))
	}
	return b
}

func TestWriteFileChunks(t *testing.T) {
	t.Parallel()
	blob := testBlob()
	for _, tc := range []struct {
		chunk, want, writes int
	}{
		{0, DefaultChunkSize, 22}, // 1 MiB / 48 KiB = 21.33
		{100_000, 100_000, 11},
		{4 << 20, MaxChunkSize, 1},
	} {
		c, g, _ := newTestClient(t)
		if err := c.WriteFile(t.Context(), DefaultBlobPath, blob, tc.chunk); err != nil {
			t.Fatalf("chunk %d: %v", tc.chunk, err)
		}
		if !bytes.Equal(g.files[DefaultBlobPath], blob) {
			t.Fatalf("chunk %d: guest file differs from blob", tc.chunk)
		}
		if len(g.writes) != tc.writes {
			t.Fatalf("chunk %d: %d writes, want %d", tc.chunk, len(g.writes), tc.writes)
		}
		for i, n := range g.writes[:len(g.writes)-1] {
			if n != tc.want {
				t.Fatalf("chunk %d: write %d has %d bytes, want %d", tc.chunk, i, n, tc.want)
			}
		}
		if g.closed != 1 || len(g.handles) != 0 {
			t.Fatalf("chunk %d: closed %d, open handles %v", tc.chunk, g.closed, g.handles)
		}
	}
}

func TestWriteFileEmpty(t *testing.T) {
	t.Parallel()
	c, g, _ := newTestClient(t)
	g.files[DefaultBlobPath] = []byte("old")
	if err := c.WriteFile(t.Context(), DefaultBlobPath, nil, 0); err != nil {
		t.Fatal(err)
	}
	if len(g.files[DefaultBlobPath]) != 0 || len(g.writes) != 0 || g.closed != 1 {
		t.Fatalf("file %q writes %v closed %d", g.files[DefaultBlobPath], g.writes, g.closed)
	}
}

func TestWriteFileClosesOnError(t *testing.T) {
	t.Parallel()
	c, g, _ := newTestClient(t)
	writes := 0
	g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
		if cmd != cmdFileWrite {
			return nil, nil, false
		}
		if writes++; writes == 3 {
			return []byte(`{"error":{"class":"GenericError","desc":"No space left on device"}}`), nil, true
		}
		return nil, nil, false
	}
	err := c.WriteFile(t.Context(), "/f", make([]byte, 10_000), 1000)
	want := "guest-file-write: agent error GenericError: No space left on device (at byte 2000 of 10000)"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	if g.closed != 1 {
		t.Fatalf("handle not closed after a failed write")
	}
}

func TestWriteFileClosesWhenCancelled(t *testing.T) {
	t.Parallel()
	c, g, _ := newTestClient(t)
	ctx, cancel := context.WithCancel(t.Context())
	g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
		if cmd == cmdFileWrite {
			cancel()
		}
		return nil, nil, false
	}
	err := c.WriteFile(ctx, "/f", make([]byte, 10_000), 1000)
	if !errors.Is(err, context.Canceled) && err != nil {
		t.Fatalf("err = %v", err)
	}
	if g.closed != 1 {
		t.Fatalf("handle not closed after cancellation")
	}
}

func TestWaitReadyBacksOff(t *testing.T) {
	t.Parallel()
	c, g, clk := newTestClient(t)
	pings := 0
	g.override = func(cmd string, _ json.RawMessage) ([]byte, error, bool) {
		if pings++; pings <= 6 {
			return nil, ErrAgentUnavailable, true
		}
		return nil, nil, false
	}
	if err := c.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 2000}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if got := clk.slept(); !reflect.DeepEqual(got, want) {
		t.Fatalf("backoff %v, want %v", got, want)
	}
}

func TestWaitReadyNoAgent(t *testing.T) {
	t.Parallel()
	c, g, _ := newTestClient(t)
	g.override = func(string, json.RawMessage) ([]byte, error, bool) {
		return nil, errors.New("QEMU guest agent is not connected"), true
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := c.WaitReady(ctx)
	if err == nil || !strings.HasPrefix(err.Error(), "guest agent did not answer within 30s: the guest may not have booted") {
		t.Fatalf("err = %v", err)
	}
	if !IsAgentUnavailable(err) || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("err %v: want ErrAgentUnavailable and the last cause", err)
	}
}

func TestWaitReadyAgentErrorMeansUp(t *testing.T) {
	t.Parallel()
	c, g, _ := newTestClient(t)
	g.override = func(string, json.RawMessage) ([]byte, error, bool) {
		return []byte(`{"error":{"class":"CommandDisabled","desc":"disabled"}}`), nil, true
	}
	if err := c.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
}
