package tlsreload

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// setup publishes a server pair (and optionally a CA bundle) and returns a
// Reloader over the secret volume.
func setup(t *testing.T, srv leaf, caPEM []byte, logs *logBuf) (*secretDir, *Reloader) {
	t.Helper()
	sd := newSecretDir(t)
	files := map[string][]byte{"tls.crt": srv.certPEM, "tls.key": srv.keyPEM}
	opts := Options{Cert: sd.path("tls.crt"), Key: sd.path("tls.key"), Logger: newLogger(logs)}
	if caPEM != nil {
		files["ca.crt"] = caPEM
		opts.CA = sd.path("ca.crt")
	}
	sd.publish(files)
	r, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return sd, r
}

func TestNewRefusesUnusableMaterial(t *testing.T) {
	t.Parallel()
	root := newCA(t, "root")
	good := root.issue(t, "server", false, time.Time{})
	other := root.issue(t, "other", false, time.Time{})
	expired := root.issue(t, "old", false, time.Now().Add(-time.Minute))
	cases := []struct {
		name    string
		files   map[string][]byte
		withCA  bool
		wantSub string
	}{
		{"garbage certificate", map[string][]byte{"tls.crt": []byte("not pem"), "tls.key": good.keyPEM}, false, "tls.crt"},
		{"mismatched key", map[string][]byte{"tls.crt": good.certPEM, "tls.key": other.keyPEM}, false, "private key does not match"},
		{"expired certificate", map[string][]byte{"tls.crt": expired.certPEM, "tls.key": expired.keyPEM}, false, "expired"},
		{"missing key", map[string][]byte{"tls.crt": good.certPEM}, false, "key:"},
		{"missing CA", map[string][]byte{"tls.crt": good.certPEM, "tls.key": good.keyPEM}, true, "CA bundle:"},
		{"CA without certificate", map[string][]byte{"tls.crt": good.certPEM, "tls.key": good.keyPEM, "ca.crt": good.keyPEM}, true, "not a CERTIFICATE"},
		{"CA empty", map[string][]byte{"tls.crt": good.certPEM, "tls.key": good.keyPEM, "ca.crt": {}}, true, "contains no PEM certificate"},
		{"CA with a key among certificates", map[string][]byte{"tls.crt": good.certPEM, "tls.key": good.keyPEM, "ca.crt": append(append(append([]byte(nil), root.pem...), good.keyPEM...), root.pem...)}, true, "block 2 is a"},
		{"CA garbage", map[string][]byte{"tls.crt": good.certPEM, "tls.key": good.keyPEM, "ca.crt": []byte("garbage")}, true, "not a PEM block"},
		{"CA truncated", map[string][]byte{"tls.crt": good.certPEM, "tls.key": good.keyPEM, "ca.crt": append(root.pem, root.pem[:len(root.pem)/2]...)}, true, "not a PEM block"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sd := newSecretDir(t)
			sd.publish(tc.files)
			opts := Options{Cert: sd.path("tls.crt"), Key: sd.path("tls.key")}
			if tc.withCA {
				opts.CA = sd.path("ca.crt")
			}
			_, err := New(opts)
			if err == nil || !strings.Contains(err.Error(), tc.wantSub) {
				t.Fatalf("New: err = %v, want one containing %q", err, tc.wantSub)
			}
		})
	}
	if _, err := New(Options{Cert: "x"}); err == nil {
		t.Fatal("New without a key file must fail")
	}
}

func TestConfigIsTLS13WithALPN(t *testing.T) {
	t.Parallel()
	root := newCA(t, "root")
	_, r := setup(t, root.issue(t, "server", false, time.Time{}), nil, &logBuf{})
	addr := serve(t, r.Config())
	c, err := dial(t, addr, pool(root), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := c.ConnectionState()
	if st.Version != tls.VersionTLS13 || st.NegotiatedProtocol != "h2" {
		t.Fatalf("version %x, ALPN %q; want TLS 1.3 and h2", st.Version, st.NegotiatedProtocol)
	}
	old := &tls.Config{RootCAs: pool(root), MaxVersion: tls.VersionTLS12}
	if c, err := tls.Dial("tcp", addr, old); err == nil {
		c.Close()
		t.Fatal("a TLS 1.2-only client must be refused")
	}
	if r.Config().ClientAuth != tls.NoClientCert {
		t.Fatal("TLS mode must not ask for client certificates")
	}
}

func TestRotationNewConnectionsSeeNewCertificate(t *testing.T) {
	t.Parallel()
	root := newCA(t, "root")
	first := root.issue(t, "server-1", false, time.Time{})
	logs := &logBuf{}
	sd, r := setup(t, first, nil, logs)
	addr := serve(t, r.Config())
	roots := pool(root)

	if got := servedSerial(t, addr, roots, nil); got != first.serial {
		t.Fatalf("before rotation: serial %d, want %d", got, first.serial)
	}
	held, err := dial(t, addr, roots, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	second := root.issue(t, "server-2", false, time.Time{})
	sd.publish(map[string][]byte{"tls.crt": second.certPEM, "tls.key": second.keyPEM})
	changed, err := r.Reload()
	if !changed || err != nil {
		t.Fatalf("Reload = %v, %v; want true, nil", changed, err)
	}
	if got := servedSerial(t, addr, roots, nil); got != second.serial {
		t.Fatalf("after rotation: serial %d, want %d", got, second.serial)
	}
	// The connection set up before the rotation keeps working.
	if _, err := held.Write([]byte{2}); err != nil {
		t.Fatalf("held connection: %v", err)
	}
	if _, err := held.Read(make([]byte, 1)); err != nil {
		t.Fatalf("held connection: %v", err)
	}
	st := r.Status()
	if st.Generation != 2 || st.Subject != "CN=server-2" || st.LastError != "" {
		t.Fatalf("status %+v", st)
	}
	if logs.count("TLS material reloaded") != 1 {
		t.Fatalf("want one reload log line, got:\n%s", logs)
	}
	// Unchanged files: no new generation, no log.
	if changed, err := r.Reload(); changed || err != nil {
		t.Fatalf("second Reload = %v, %v; want false, nil", changed, err)
	}
	if r.Status().Generation != 2 {
		t.Fatal("an unchanged poll must not bump the generation")
	}
}

func TestBrokenUpdateKeepsLastGoodPair(t *testing.T) {
	t.Parallel()
	root := newCA(t, "root")
	good := root.issue(t, "server", false, time.Time{})
	other := root.issue(t, "other", false, time.Time{})
	expired := root.issue(t, "old", false, time.Now().Add(-time.Minute))
	cases := []struct {
		name    string
		files   map[string][]byte
		wantSub string
	}{
		{"garbage PEM", map[string][]byte{"tls.crt": []byte("-----BEGIN CERTIFICATE-----\nnope\n"), "tls.key": good.keyPEM}, "tls.crt"},
		{"mismatched key", map[string][]byte{"tls.crt": other.certPEM, "tls.key": good.keyPEM}, "private key does not match"},
		{"empty key", map[string][]byte{"tls.crt": good.certPEM, "tls.key": {}}, "tls.key"},
		{"expired certificate", map[string][]byte{"tls.crt": expired.certPEM, "tls.key": expired.keyPEM}, "expired"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logs := &logBuf{}
			sd, r := setup(t, good, nil, logs)
			addr := serve(t, r.Config())
			roots := pool(root)

			sd.publish(tc.files)
			for range 3 { // every poll fails, but it is logged once
				changed, err := r.Reload()
				if changed || err == nil || !strings.Contains(err.Error(), tc.wantSub) {
					t.Fatalf("Reload = %v, %v; want false and an error containing %q", changed, err, tc.wantSub)
				}
			}
			if got := servedSerial(t, addr, roots, nil); got != good.serial {
				t.Fatalf("serial %d after a broken update; want the last good %d", got, good.serial)
			}
			if n := logs.count("TLS material update rejected"); n != 1 {
				t.Fatalf("rejection logged %d times, want once:\n%s", n, logs)
			}
			if !strings.Contains(logs.String(), tc.wantSub) {
				t.Fatalf("log does not say why:\n%s", logs)
			}
			st := r.Status()
			if st.Generation != 1 || !strings.Contains(st.LastError, tc.wantSub) || st.LastErrAt.IsZero() {
				t.Fatalf("status %+v", st)
			}

			// A fixed update is taken and clears the error.
			fixed := root.issue(t, "fixed", false, time.Time{})
			sd.publish(map[string][]byte{"tls.crt": fixed.certPEM, "tls.key": fixed.keyPEM})
			if changed, err := r.Reload(); !changed || err != nil {
				t.Fatalf("Reload after fix = %v, %v", changed, err)
			}
			if got := servedSerial(t, addr, roots, nil); got != fixed.serial {
				t.Fatalf("serial %d after fix, want %d", got, fixed.serial)
			}
			if st := r.Status(); st.LastError != "" || st.Generation != 2 {
				t.Fatalf("status after fix %+v", st)
			}
		})
	}
}

func TestFileRemovedMidRotationKeepsServing(t *testing.T) {
	t.Parallel()
	root := newCA(t, "root")
	good := root.issue(t, "server", false, time.Time{})
	logs := &logBuf{}
	sd, r := setup(t, good, nil, logs)
	addr := serve(t, r.Config())
	if err := os.Remove(sd.path("tls.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reload(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Reload err = %v, want not-exist", err)
	}
	if got := servedSerial(t, addr, pool(root), nil); got != good.serial {
		t.Fatalf("serial %d, want %d", got, good.serial)
	}
	// The same pair coming back is not a new generation, and clears the error.
	if err := os.Symlink("..data/tls.key", sd.path("tls.key")); err != nil {
		t.Fatal(err)
	}
	if changed, err := r.Reload(); changed || err != nil {
		t.Fatalf("Reload = %v, %v", changed, err)
	}
	if st := r.Status(); st.LastError != "" || st.Generation != 1 {
		t.Fatalf("status %+v", st)
	}
}

func TestCARotationForClientVerification(t *testing.T) {
	t.Parallel()
	serverCA := newCA(t, "server-ca")
	oldClients, newClients := newCA(t, "clients-2024"), newCA(t, "clients-2025")
	oldClient := oldClients.issue(t, "shard-a", true, time.Time{}).pair(t)
	newClient := newClients.issue(t, "shard-b", true, time.Time{}).pair(t)
	srv := serverCA.issue(t, "server", false, time.Time{})

	sd, r := setup(t, srv, oldClients.pem, &logBuf{})
	if r.Config().ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatal("mTLS config must require and verify client certificates")
	}
	addr := serve(t, r.Config())
	roots := pool(serverCA)

	mustDial := func(client *tls.Certificate, ok bool, when string) {
		t.Helper()
		c, err := dial(t, addr, roots, client)
		if c != nil {
			c.Close()
		}
		if ok != (err == nil) {
			t.Fatalf("%s: dial err = %v, want ok=%v", when, err, ok)
		}
	}
	mustDial(&oldClient, true, "old CA, old client")
	mustDial(&newClient, false, "old CA, new client")
	mustDial(nil, false, "old CA, no client certificate")

	// Overlap: both CAs trusted while clients move.
	sd.publish(map[string][]byte{"tls.crt": srv.certPEM, "tls.key": srv.keyPEM,
		"ca.crt": append(append([]byte{}, oldClients.pem...), newClients.pem...)})
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v", changed, err)
	}
	mustDial(&oldClient, true, "both CAs, old client")
	mustDial(&newClient, true, "both CAs, new client")

	// The old CA retired: its clients are refused on the next connection.
	sd.publish(map[string][]byte{"tls.crt": srv.certPEM, "tls.key": srv.keyPEM, "ca.crt": newClients.pem})
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v", changed, err)
	}
	mustDial(&oldClient, false, "new CA, old client")
	mustDial(&newClient, true, "new CA, new client")

	// A broken CA update keeps the last good bundle.
	sd.publish(map[string][]byte{"tls.crt": srv.certPEM, "tls.key": srv.keyPEM, "ca.crt": []byte("oops")})
	if _, err := r.Reload(); err == nil {
		t.Fatal("a garbage CA bundle must be rejected")
	}
	mustDial(&newClient, true, "broken CA update, new client")
	mustDial(&oldClient, false, "broken CA update, old client")
}

func TestRunPollsUntilCancelled(t *testing.T) {
	t.Parallel()
	root := newCA(t, "root")
	first := root.issue(t, "server-1", false, time.Time{})
	sd, r0 := setup(t, first, nil, &logBuf{})
	r, err := New(Options{Cert: r0.opts.Cert, Key: r0.opts.Key, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r.Config())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()

	second := root.issue(t, "server-2", false, time.Time{})
	sd.publish(map[string][]byte{"tls.crt": second.certPEM, "tls.key": second.keyPEM})
	deadline := time.Now().Add(5 * time.Second)
	for servedSerial(t, addr, pool(root), nil) != second.serial {
		if time.Now().After(deadline) {
			t.Fatal("Run did not pick up the rotated certificate within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestConcurrentHandshakesDuringRotation(t *testing.T) {
	t.Parallel()
	root := newCA(t, "root")
	pairs := []leaf{root.issue(t, "a", false, time.Time{}), root.issue(t, "b", false, time.Time{})}
	sd, r := setup(t, pairs[0], nil, &logBuf{})
	addr := serve(t, r.Config())
	valid := map[int64]bool{pairs[0].serial: true, pairs[1].serial: true}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for range 10 {
				c, err := dial(t, addr, pool(root), nil)
				if err != nil {
					errs <- err
					return
				}
				s := c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
				c.Close()
				if !valid[s] {
					errs <- errors.New("served an unknown certificate")
					return
				}
			}
			errs <- nil
		}()
	}
	for i := range 10 {
		p := pairs[(i+1)%2]
		sd.publish(map[string][]byte{"tls.crt": p.certPEM, "tls.key": p.keyPEM})
		if _, err := r.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
