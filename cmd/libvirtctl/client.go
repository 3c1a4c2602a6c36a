package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
	"github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1/adminv1connect"
)

// clients are the two generated clients on one HTTP/2 connection pool.
type clients struct {
	admin    adminv1connect.AdminServiceClient
	provider bigfleetv1alpha1connect.CapacityProviderClient
}

// dial builds the clients. TLS is on when the address is https:// or any
// TLS flag is given; otherwise it speaks h2c (HTTP/2 with prior
// knowledge), which the provider serves on its plaintext listener and
// which gRPC requires.
func dial(o *opts) (*clients, error) {
	base, useTLS := o.addr, o.tlsCA != "" || o.tlsCert != "" || o.insecure
	switch {
	case strings.HasPrefix(base, "https://"):
		useTLS = true
	case strings.HasPrefix(base, "http://"):
		if useTLS {
			return nil, usagef("--addr %s is plaintext but TLS flags are set; use https://", base)
		}
	case useTLS:
		base = "https://" + base
	default:
		base = "http://" + base
	}
	base = strings.TrimSuffix(base, "/")

	tr := &http.Transport{ForceAttemptHTTP2: true, TLSHandshakeTimeout: 10 * time.Second, IdleConnTimeout: time.Minute}
	protos := new(http.Protocols)
	if useTLS {
		cfg, err := clientTLS(o)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = cfg
		protos.SetHTTP2(true)
		protos.SetHTTP1(o.protocol != "grpc")
	} else {
		protos.SetUnencryptedHTTP2(true)
	}
	tr.Protocols = protos
	hc := &http.Client{Transport: tr}

	var copts []connect.ClientOption
	switch o.protocol {
	case "grpc":
		copts = append(copts, connect.WithGRPC())
	case "grpcweb":
		copts = append(copts, connect.WithGRPCWeb())
	}
	return &clients{
		admin:    adminv1connect.NewAdminServiceClient(hc, base, copts...),
		provider: bigfleetv1alpha1connect.NewCapacityProviderClient(hc, base, copts...),
	}, nil
}

func clientTLS(o *opts) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.insecure} //nolint:gosec // --insecure is explicit
	if o.tlsCA != "" {
		pem, err := os.ReadFile(o.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca: %s holds no PEM certificate", o.tlsCA)
		}
		cfg.RootCAs = pool
	}
	if o.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
