//go:build integration

package integration

import (
	"os"
	"sync"
	"testing"

	"google.golang.org/grpc/credentials"

	"github.com/bigfleet/libvirt-provider/internal/testpki"
)

// Admin writes (Release) need a caller known by a verified client
// certificate, so the providers the suite starts serve mTLS with a
// throwaway CA, and the suite dials them as the client adminClient.
const adminClient = "it-admin"

type testPKI struct {
	dir   string // ca.pem, server.pem/-key.pem
	flags []string
	creds credentials.TransportCredentials
}

var (
	pkiOnce sync.Once
	pki     testPKI
	pkiErr  error
)

// adminWriteFlags returns the provider flags that allow admin writes to
// adminClient, and the credentials to dial it with. One PKI serves the
// whole suite (TestMain removes its directory).
func adminWriteFlags(t *testing.T, _ string) ([]string, credentials.TransportCredentials) {
	t.Helper()
	pkiOnce.Do(func() {
		if pki.dir, pkiErr = os.MkdirTemp("", "bigfleet-it-pki-"); pkiErr != nil {
			return
		}
		flags, cfg, err := testpki.AdminMTLS(pki.dir, adminClient)
		pki.flags, pki.creds, pkiErr = flags, credentials.NewTLS(cfg), err
	})
	if pkiErr != nil {
		t.Fatal(pkiErr)
	}
	return pki.flags, pki.creds
}
