package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/bigfleet/libvirt-provider/backend/fake"
	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/server/lifecycle"
	"github.com/bigfleet/libvirt-provider/server/lifecycle/record"
	"github.com/bigfleet/libvirt-provider/server/store"
)

// The read path benchmarks: Get and List through the real handler stack
// (interceptors, codec, engine over a memory store), in process, so
// -benchmem and -cpuprofile show the provider's own cost per call:
//
//	go test ./server -run '^$' -bench ReadPath -benchmem -cpuprofile cpu.out

// benchFleet builds a real engine with n slots shaped like the capacity
// model's (two resources, two allocatable, the two mirrored labels).
func benchFleet(b *testing.B, n int) (*lifecycle.Engine, []string) {
	b.Helper()
	return benchFleetOn(b, n, store.NewMemory())
}

// benchFleetOn is benchFleet over the given store.
func benchFleetOn(b *testing.B, n int, st record.Store) (*lifecycle.Engine, []string) {
	b.Helper()
	labels := map[string]string{"node.kubernetes.io/instance-type": "kvm.small", "topology.kubernetes.io/zone": "zone-a"}
	res := map[string]string{"cpu": "1", "memory": "2Gi"}
	alloc := map[string]string{"cpu": "2", "memory": "4Gi"}
	seed := make([]record.Machine, n)
	ids := make([]string, n)
	for i := range seed {
		ids[i] = fmt.Sprintf("zone-a-kvm-small-%04d", i)
		seed[i] = record.Machine{ID: ids[i], InstanceType: "kvm.small", Zone: "zone-a",
			CapacityType: record.CapacityOnDemand, PricePerHour: 0.0416, VCPU: 2, MemoryMiB: 4096,
			Resources: res, Allocatable: alloc, Labels: labels}
	}
	be := fake.New(fake.Options{Zones: []string{"zone-a"}})
	eng, err := lifecycle.New(lifecycle.Config{Provider: "bench", Seed: seed}, st, be)
	if err != nil {
		b.Fatal(err)
	}
	eng.Start(context.Background())
	b.Cleanup(eng.Close)
	return eng, ids
}

func benchHandler(eng Engine) http.Handler {
	return NewHandler(Options{Engine: eng, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// connectCall runs one Connect-protocol unary call (binary proto) through
// h without a network, and fails unless it answered 200.
func connectCall(b *testing.B, h http.Handler, method string, body []byte) int {
	req := httptest.NewRequest(http.MethodPost, svc+method, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/proto")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		b.Fatalf("%s: HTTP %d: %s", method, w.Code, w.Body.String())
	}
	return w.Body.Len()
}

func mustMarshal(b *testing.B, m proto.Message) []byte {
	out, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkReadPath: one Get, and one full List at 10k, through the
// handler stack (Connect protocol, binary proto).
func BenchmarkReadPath(b *testing.B) {
	eng, ids := benchFleet(b, 10_000)
	h := benchHandler(eng)
	b.Run("Get", func(b *testing.B) {
		body := mustMarshal(b, &pb.MachineRef{Id: ids[42]})
		b.ReportAllocs()
		for b.Loop() {
			connectCall(b, h, "Get", body)
		}
	})
	b.Run("List10k", func(b *testing.B) {
		body := mustMarshal(b, &pb.ListFilter{})
		b.ReportAllocs()
		var n int
		for b.Loop() {
			n = connectCall(b, h, "List", body)
		}
		b.ReportMetric(float64(n)/1e6, "MB")
	})
	// A page of 1,000 from the middle of the fleet: found by the cursor's
	// revision (binary search), so it costs what a delta of 1,000 costs.
	b.Run("Page1000", func(b *testing.B) {
		mid, err := eng.ListShared(context.Background(), record.ListQuery{MaxResults: 5000})
		if err != nil {
			b.Fatal(err)
		}
		body := mustMarshal(b, &pb.ListFilter{MaxResults: 1000, SinceRevision: mid.Revision})
		b.ReportAllocs()
		for b.Loop() {
			connectCall(b, h, "List", body)
		}
	})
}

// BenchmarkObserver: the interceptors alone around a handler that does
// nothing, for a successful read (the common polled case).
func BenchmarkObserver(b *testing.B) {
	metrics := NewMetrics(nil)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ic := connect.WithInterceptors(observer{log: log, metrics: metrics}, recoverer{log: log, metrics: metrics})
	res := &pb.Machine{Id: "m"}
	h := connect.NewUnaryHandler(svc+"Get", func(context.Context, *connect.Request[pb.MachineRef]) (*connect.Response[pb.Machine], error) {
		return connect.NewResponse(res), nil
	}, ic)
	bare := connect.NewUnaryHandler(svc+"Get", func(context.Context, *connect.Request[pb.MachineRef]) (*connect.Response[pb.Machine], error) {
		return connect.NewResponse(res), nil
	})
	body := mustMarshal(b, &pb.MachineRef{Id: "m"})
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"intercepted", h}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				connectCall(b, c.h, "Get", body)
			}
		})
	}
}

// BenchmarkGetGRPC: Gets from 64 concurrent grpc-go callers over h2c on
// loopback, as in make bench but in one process (for pprof: make
// bench-profile).
func BenchmarkGetGRPC(b *testing.B) {
	eng, ids := benchFleet(b, 100_000)
	conns := make(chan *grpc.ClientConn, 64)
	addr := grpcServe(b, eng)
	for range cap(conns) {
		conns <- benchDial(b, addr)
	}
	b.SetParallelism(32) // 64 callers on 2 cores, a connection each
	b.ReportAllocs()
	b.RunParallel(func(pb_ *testing.PB) {
		conn := <-conns
		i := 0
		for pb_.Next() {
			i++
			if err := conn.Invoke(context.Background(), svc+"Get", &pb.MachineRef{Id: ids[i%len(ids)]}, new(pb.Machine)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkGetGRPCOneConn: as BenchmarkGetGRPC, but the 64 callers share
// one connection, as a BigFleet shard's do (issue 24; for pprof).
func BenchmarkGetGRPCOneConn(b *testing.B) {
	eng, ids := benchFleet(b, 100_000)
	conn := benchDial(b, grpcServe(b, eng))
	b.SetParallelism(32) // 64 callers on 2 cores
	b.ReportAllocs()
	var next atomic.Int64
	b.RunParallel(func(pb_ *testing.PB) {
		i := int(next.Add(7919))
		for pb_.Next() {
			i++
			if err := conn.Invoke(context.Background(), svc+"Get", &pb.MachineRef{Id: ids[i%len(ids)]}, new(pb.Machine)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkListGRPC: one full List of 100k machines at a time over h2c,
// decoded by a grpc-go client as BigFleet does (for pprof: make
// bench-profile).
func BenchmarkListGRPC(b *testing.B) {
	eng, _ := benchFleet(b, 100_000)
	conn := benchDial(b, grpcServe(b, eng))
	b.ReportAllocs()
	for b.Loop() {
		var l pb.MachineList
		if err := conn.Invoke(context.Background(), svc+"List", &pb.ListFilter{}, &l,
			grpc.MaxCallRecvMsgSize(64<<20)); err != nil || len(l.Machines) != 100_000 {
			b.Fatalf("List: %v (%d machines)", err, len(l.Machines))
		}
	}
}

// grpcServe serves eng's handler stack on loopback (the provider's own
// listener) and returns its address.
func grpcServe(b *testing.B, eng Engine) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	lis := newListener(ln, benchHandler(eng), nil, slog.New(slog.DiscardHandler))
	go func() { _ = lis.Serve() }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = lis.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// benchDial is a grpc-go client connection of its own to addr.
func benchDial(b *testing.B, addr string) *grpc.ClientConn {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return conn
}
