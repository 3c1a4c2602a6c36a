package admin_test

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"testing"

	"connectrpc.com/connect"

	adminv1 "github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1"
	"github.com/bigfleet/libvirt-provider/gen/libvirtprovider/admin/v1/adminv1connect"
	"github.com/bigfleet/libvirt-provider/server/admin"
	"github.com/bigfleet/libvirt-provider/server/admin/admintest"
)

// TestWritesNeedAVerifiedCertificate: the Service as cmd/libvirt builds and
// mounts it lets no caller write without a client certificate the TLS
// stack verified, whatever its Options say. Every string option is set to
// the one listed name, so an option that names callers (as the removed
// InsecureTestCaller did) would open writes here and fail the test.
func TestWritesNeedAVerifiedCertificate(t *testing.T) {
	t.Parallel()
	const name = "admintest"
	ca := admin.NewTestCA(t)
	_, listed := ca.Issue(t, x509.Certificate{Subject: pkix.Name{CommonName: name}})
	_, foreign := admin.NewTestCA(t).Issue(t, x509.Certificate{Subject: pkix.Name{CommonName: name}})

	opts := admin.Options{Engine: admintest.Start(t, admintest.Options{}).Engine, AllowWrite: true}
	v := reflect.ValueOf(&opts).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.String && f.CanSet() {
			f.SetString(name)
		}
	}
	opts.CordonFile = filepath.Join(t.TempDir(), "cordons.json")
	opts.DownFile = filepath.Join(t.TempDir(), "down.json")
	var err error
	if opts.Clients, err = admin.ParseClients(name); err != nil {
		t.Fatal(err)
	}
	svc, err := admin.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	svc.Mount(mux, connect.WithInterceptors())

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, tc := range []struct {
		name       string
		auth       tls.ClientAuthType // -1: plaintext
		clientCert *tls.Certificate
		may        bool
	}{
		{"plaintext", -1, nil, false},
		{"TLS without a client certificate", tls.VerifyClientCertIfGiven, nil, false},
		{"a listed certificate the server did not verify", tls.RequireAnyClientCert, &listed, false},
		{"a listed name from another CA, unverified", tls.RequestClientCert, &foreign, false},
		{"a verified listed certificate", tls.RequireAndVerifyClientCert, &listed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := adminv1connect.NewAdminServiceClient(serve(t, mux, tc.auth, pool, tc.clientCert))
			who, err := c.WhoAmI(t.Context(), connect.NewRequest(&adminv1.WhoAmIRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			if who.Msg.GetMayWrite() != tc.may || who.Msg.GetAnonymous() == tc.may {
				t.Errorf("WhoAmI = %v", who.Msg)
			}
			_, err = c.TriggerReconcile(t.Context(), connect.NewRequest(&adminv1.TriggerReconcileRequest{}))
			if tc.may {
				if err != nil {
					t.Fatalf("verified caller refused: %v", err)
				}
				return
			}
			wantCode(t, err, connect.CodePermissionDenied)
		})
	}
}

// serve runs h in plaintext (auth < 0) or over TLS 1.3 with the client
// authentication auth against pool, and returns a client presenting cert.
func serve(t *testing.T, h http.Handler, auth tls.ClientAuthType, pool *x509.CertPool, cert *tls.Certificate) (*http.Client, string) {
	t.Helper()
	hs := httptest.NewUnstartedServer(h)
	t.Cleanup(hs.Close)
	if auth < 0 {
		hs.Start()
		return hs.Client(), hs.URL
	}
	hs.TLS = &tls.Config{ClientAuth: auth, ClientCAs: pool, MinVersion: tls.VersionTLS13}
	hs.StartTLS()
	c := hs.Client()
	if cert != nil {
		c.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{*cert}
	}
	return c, hs.URL
}
