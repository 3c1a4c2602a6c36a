package tlsreload

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// parseCABundle is the one CA parser of the module. Unlike
// x509.CertPool.AppendCertsFromPEM, which skips what it cannot parse, it
// refuses anything but certificates: half a bundle silently trusted would
// lock out the clients signed by the missing half, and a key pasted into a
// CA file is a mistake to surface, not to step over. A bundle without any
// certificate is refused too: an empty pool would reject every client,
// which looks like a network fault, not a typo.
func parseCABundle(b []byte) (*x509.CertPool, error) {
	pool, n := x509.NewCertPool(), 0
	for rest := bytes.TrimSpace(b); len(rest) > 0; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("trailing data that is not a PEM block")
		}
		rest = bytes.TrimSpace(rest)
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %q, not a CERTIFICATE", n+1, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate block %d: %w", n+1, err)
		}
		pool.AddCert(c)
	}
	if n == 0 {
		return nil, errors.New("contains no PEM certificate")
	}
	return pool, nil
}
