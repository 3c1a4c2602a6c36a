package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1/bigfleetv1alpha1connect"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
)

func TestRequestIDEchoed(t *testing.T) {
	t.Parallel()
	ts := startServer(t, modeH2C)
	hc := httpClientFor(ts, nil)
	defer hc.CloseIdleConnections()
	for _, proto := range []struct {
		name string
		opt  connect.ClientOption
	}{{"connect", connect.WithProtoJSON()}, {"grpc", connect.WithGRPC()}, {"grpcweb", connect.WithGRPCWeb()}} {
		t.Run(proto.name, func(t *testing.T) {
			t.Parallel()
			client := bigfleetv1alpha1connect.NewCapacityProviderClient(hc, ts.url, proto.opt)
			req := connect.NewRequest(&pb.MachineRef{Id: "m-spec"})
			req.Header().Set("X-Request-Id", "trace-"+proto.name)
			res, err := client.Get(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Header().Get("X-Request-Id"); got != "trace-"+proto.name {
				t.Errorf("echoed id %q", got)
			}
			// Errors carry it too (header or trailer, depending on protocol).
			req = connect.NewRequest(&pb.MachineRef{Id: "nope"})
			req.Header().Set("X-Request-Id", "err-"+proto.name)
			_, err = client.Get(t.Context(), req)
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Meta().Get("X-Request-Id") != "err-"+proto.name {
				t.Errorf("error %v: meta %v", err, ce.Meta())
			}
			// Absent or hostile ids are replaced by a minted one.
			req = connect.NewRequest(&pb.MachineRef{Id: "m-spec"})
			req.Header().Set("X-Request-Id", "bad id\twith spaces")
			if res, err = client.Get(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			if got := res.Header().Get("X-Request-Id"); len(got) != 24 || strings.ContainsAny(got, " \t") {
				t.Errorf("minted id %q", got)
			}
		})
	}
	// grpc-go sees it as response metadata.
	hdr, err := grpcClient{dialGRPC(t, ts, nil)}.call(t.Context(), bigfleetv1alpha1connect.CapacityProviderGetProcedure,
		&pb.MachineRef{Id: "m-spec"}, &pb.Machine{})
	if err != nil || hdr.Get("x-request-id") == "" {
		t.Errorf("grpc-go: err %v, header %v", err, hdr)
	}
}

// TestLogsNoSecrets sends a distinctive blob and metadata and checks that
// the per-RPC log line has the useful fields and none of the payload.
func TestLogsNoSecrets(t *testing.T) {
	t.Parallel()
	ts := startServer(t, modeH2C)
	const blob, metaKey, metaVal = "BLOB-SECRET-7f3a9c", "meta-key-4411", "META-VALUE-99e2"
	ts.engine.errs["m-bad"] = &record.Error{Code: record.CodeAborted, Msg: "machine m-bad is FAILED"}
	ts.engine.machines["m-bad"] = record.Machine{ID: "m-bad"}
	c := grpcClient{dialGRPC(t, ts, nil)}
	for _, id := range []string{"m-idle", "m-bad"} {
		_, _ = c.call(t.Context(), bigfleetv1alpha1connect.CapacityProviderConfigureProcedure, &pb.ConfigureRequest{
			MachineId: id, ClusterId: "c1", BootstrapBlob: []byte(blob), ShardMetadata: map[string]string{metaKey: metaVal},
		}, &pb.TransitionAck{})
	}
	if got := ts.engine.lastConfigure; string(got.BootstrapBlob) != blob || got.ShardMetadata[metaKey] != metaVal {
		t.Fatalf("engine did not receive the request: %+v", got)
	}
	logs := ts.logs.String()
	for _, secret := range []string{blob, metaKey, metaVal} {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain %q:\n%s", secret, logs)
		}
	}
	lines := rpcLogLines(t, logs)
	if len(lines) != 2 {
		t.Fatalf("want 2 rpc log lines, got %d:\n%s", len(lines), logs)
	}
	for _, l := range lines {
		for _, k := range []string{"method", "code", "duration_ms", "request_id", "peer", "protocol"} {
			if l[k] == nil || l[k] == "" {
				t.Errorf("log line lacks %s: %v", k, l)
			}
		}
	}
	if lines[1]["code"] != "aborted" || lines[1]["method"] != bigfleetv1alpha1connect.CapacityProviderConfigureProcedure {
		t.Errorf("second line = %v", lines[1])
	}
}

func rpcLogLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, raw := range bytes.Split([]byte(logs), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(raw, &m) == nil && m["msg"] == "rpc" {
			out = append(out, m)
		}
	}
	return out
}

func TestPanicRecovered(t *testing.T) {
	t.Parallel()
	ts := startServer(t, modeH2C)
	c := grpcClient{dialGRPC(t, ts, nil)}
	for range 2 {
		_, err := c.call(t.Context(), bigfleetv1alpha1connect.CapacityProviderGetProcedure, &pb.MachineRef{Id: "panic"}, &pb.Machine{})
		if got := codeOfErr(err); got != connect.CodeInternal || strings.Contains(err.Error(), "scripted") {
			t.Errorf("code %v, err %v; want internal without the panic value", got, err)
		}
	}
	if n := counterValue(ts.metrics.panics); n != 2 {
		t.Errorf("panics_recovered_total = %v, want 2", n)
	}
	// The server is still healthy for the next caller on the same connection.
	if _, err := c.call(t.Context(), bigfleetv1alpha1connect.CapacityProviderGetProcedure, &pb.MachineRef{Id: "m-spec"}, &pb.Machine{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ts.logs.String(), "panic recovered") {
		t.Error("panic not logged")
	}
	if n := counterValue(ts.metrics.rpcs.WithLabelValues(bigfleetv1alpha1connect.CapacityProviderGetProcedure, "internal")); n != 2 {
		t.Errorf("rpc_requests_total{code=internal} = %v", n)
	}
}

// TestReadLimit: a message over MaxRequestBytes is refused by connect
// before it reaches the engine.
func TestReadLimit(t *testing.T) {
	t.Parallel()
	ts := startServer(t, modeH2C)
	big := make([]byte, MaxRequestBytes+1)
	_, err := grpcClient{dialGRPC(t, ts, nil)}.call(t.Context(), bigfleetv1alpha1connect.CapacityProviderConfigureProcedure,
		&pb.ConfigureRequest{MachineId: "m-idle", BootstrapBlob: big}, &pb.TransitionAck{})
	if got := codeOfErr(err); got != connect.CodeResourceExhausted {
		t.Errorf("code %v (%v), want resource_exhausted", got, err)
	}
	if ts.engine.lastConfigure.MachineID != "" {
		t.Error("oversized request reached the engine")
	}
}

// counterValue reads one counter without pulling in prometheus/testutil.
func counterValue(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var d dto.Metric
	_ = (<-ch).Write(&d)
	return d.GetCounter().GetValue()
}
