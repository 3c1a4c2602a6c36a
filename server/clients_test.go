package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
)

// rpcClient is the slice of the service the wire tests drive, implemented
// once per client stack so one table covers them all.
type rpcClient interface {
	call(ctx context.Context, procedure string, req, res proto.Message) (hdr http.Header, err error)
}

// codeOfErr normalises grpc-go and connect-go errors: both use the gRPC
// code numbering.
func codeOfErr(err error) connect.Code {
	if err == nil {
		return 0
	}
	if st, ok := status.FromError(err); ok {
		return connect.Code(st.Code())
	}
	return connect.CodeOf(err)
}

// grpcClient is grpc-go, the stand-in for BigFleet's shard client. gen/ has
// only connect code, so it invokes methods by their full name with the
// generated message types, exactly as a generated grpc stub would.
type grpcClient struct{ conn *grpc.ClientConn }

func (c grpcClient) call(ctx context.Context, procedure string, req, res proto.Message) (http.Header, error) {
	var hdr, trl metadata.MD
	err := c.conn.Invoke(ctx, procedure, req, res, grpc.Header(&hdr), grpc.Trailer(&trl))
	h := http.Header{}
	for _, md := range []metadata.MD{hdr, trl} {
		for k, vs := range md {
			for _, v := range vs {
				h.Add(k, v)
			}
		}
	}
	return h, err
}

func dialGRPC(t *testing.T, ts *testServer, tlsCfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	conn, err := grpc.NewClient(ts.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// connectStack is connect-go speaking one of its three protocols.
type connectStack struct {
	hc   *http.Client
	base string
	opts []connect.ClientOption
}

// call goes through the generated client, as a Go user of the API would.
func (c connectStack) call(ctx context.Context, procedure string, req, res proto.Message) (http.Header, error) {
	cl := bigfleetv1alpha1connect.NewCapacityProviderClient(c.hc, c.base, c.opts...)
	var (
		hdr http.Header
		err error
	)
	switch procedure {
	case bigfleetv1alpha1connect.CapacityProviderGetProcedure:
		var r *connect.Response[pb.Machine]
		if r, err = cl.Get(ctx, connect.NewRequest(req.(*pb.MachineRef))); err == nil {
			proto.Merge(res, r.Msg)
			hdr = r.Header()
		}
	case bigfleetv1alpha1connect.CapacityProviderListProcedure:
		var r *connect.Response[pb.MachineList]
		if r, err = cl.List(ctx, connect.NewRequest(req.(*pb.ListFilter))); err == nil {
			proto.Merge(res, r.Msg)
			hdr = r.Header()
		}
	case bigfleetv1alpha1connect.CapacityProviderCreateProcedure:
		var r *connect.Response[pb.TransitionAck]
		if r, err = cl.Create(ctx, connect.NewRequest(req.(*pb.CreateRequest))); err == nil {
			proto.Merge(res, r.Msg)
			hdr = r.Header()
		}
	case bigfleetv1alpha1connect.CapacityProviderConfigureProcedure:
		var r *connect.Response[pb.TransitionAck]
		if r, err = cl.Configure(ctx, connect.NewRequest(req.(*pb.ConfigureRequest))); err == nil {
			proto.Merge(res, r.Msg)
			hdr = r.Header()
		}
	case bigfleetv1alpha1connect.CapacityProviderDrainProcedure:
		var r *connect.Response[pb.TransitionAck]
		if r, err = cl.Drain(ctx, connect.NewRequest(req.(*pb.DrainRequest))); err == nil {
			proto.Merge(res, r.Msg)
			hdr = r.Header()
		}
	case bigfleetv1alpha1connect.CapacityProviderDeleteProcedure:
		var r *connect.Response[pb.TransitionAck]
		if r, err = cl.Delete(ctx, connect.NewRequest(req.(*pb.DeleteRequest))); err == nil {
			proto.Merge(res, r.Msg)
			hdr = r.Header()
		}
	default:
		panic("unknown procedure " + procedure)
	}
	if ce := new(connect.Error); err != nil && errors.As(err, &ce) {
		hdr = ce.Meta()
	}
	return hdr, err
}

// httpClientFor returns an HTTP/2 client for the server's mode: h2c with
// prior knowledge in the clear, ALPN h2 over TLS.
func httpClientFor(ts *testServer, tlsCfg *tls.Config) *http.Client {
	tr := &http.Transport{TLSClientConfig: tlsCfg}
	p := new(http.Protocols)
	if tlsCfg == nil {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP2(true)
	}
	tr.Protocols = p
	return &http.Client{Transport: tr}
}

// clientStacks lists every client stack the service must serve.
func clientStacks(t *testing.T, ts *testServer, tlsCfg *tls.Config) map[string]rpcClient {
	hc := httpClientFor(ts, tlsCfg)
	t.Cleanup(hc.CloseIdleConnections)
	return map[string]rpcClient{
		"grpc-go":         grpcClient{dialGRPC(t, ts, tlsCfg)},
		"connect-binary":  connectStack{hc: hc, base: ts.url},
		"connect-json":    connectStack{hc: hc, base: ts.url, opts: []connect.ClientOption{connect.WithProtoJSON()}},
		"connect-grpc":    connectStack{hc: hc, base: ts.url, opts: []connect.ClientOption{connect.WithGRPC()}},
		"connect-grpcweb": connectStack{hc: hc, base: ts.url, opts: []connect.ClientOption{connect.WithGRPCWeb()}},
	}
}
