package tlsreload

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// nextCert decodes the next PEM block of a CA bundle. Unlike
// x509.CertPool.AppendCertsFromPEM, which skips what it cannot parse, a
// truncated or corrupt block is an error: half a bundle silently trusted
// would lock out the clients signed by the missing half. Non-certificate
// blocks are skipped (c == nil).
func nextCert(b []byte) (c *x509.Certificate, rest []byte, err error) {
	block, rest := pem.Decode(b)
	if block == nil {
		return nil, nil, errors.New("trailing data that is not a PEM block")
	}
	rest = bytes.TrimSpace(rest)
	if block.Type != "CERTIFICATE" {
		return nil, rest, nil
	}
	c, err = x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate block: %w", err)
	}
	return c, rest, nil
}
