//go:build soak

package soak

import (
	"google.golang.org/grpc/credentials"

	"github.com/bigfleet/libvirt-provider/internal/testpki"
)

// The soak releases FAILED machines through the admin API, whose writes
// need a caller known by a verified client certificate. So the provider
// serves mTLS with a throwaway CA, and the soak's clients present the
// certificate of adminClient, as shards would present theirs.
const adminClient = "soak-admin"

// adminWriteFlags returns the provider flags that allow admin writes to
// adminClient, with the CA and server key pair written into dir, and the
// credentials to dial it with.
func adminWriteFlags(_, dir string) ([]string, credentials.TransportCredentials, error) {
	flags, cfg, err := testpki.AdminMTLS(dir, adminClient)
	if err != nil {
		return nil, nil, err
	}
	return flags, credentials.NewTLS(cfg), nil
}
