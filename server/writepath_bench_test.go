package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	pb "github.com/bigfleet/libvirt-provider/gen/bigfleet/v1alpha1"
	"github.com/bigfleet/libvirt-provider/server/store"
)

// BenchmarkWritePath: 64 callers, each churning its own slots with a Create
// and then a Delete, through the handler stack over the durable store (group
// commits with fsync) and the fake backend finishing each transition in the
// background, as the certify mode runs. An op is one accepted mutation;
// -benchmem shows what it allocates. Issue 24: with 64 callers on one
// connection a Create's ack is bounded by the server's CPU per mutation.
//
//	go test ./server -run '^$' -bench WritePath -benchmem -cpuprofile cpu.out
func BenchmarkWritePath(b *testing.B) {
	st, err := store.OpenBolt(filepath.Join(b.TempDir(), "state.db"), store.BoltOptions{})
	if err != nil {
		b.Fatal(err)
	}
	eng, ids := benchFleetOn(b, 6400, st)
	h := benchHandler(eng)
	call := func(method string, body []byte) bool {
		req := httptest.NewRequest(http.MethodPost, svc+method, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/proto")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code == http.StatusOK
	}
	var next atomic.Int64
	b.SetParallelism(32) // 64 callers on 2 CPUs
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb_ *testing.PB) {
		c := int(next.Add(1) - 1)
		mine := ids[c*100 : (c+1)*100]
		created := make([]bool, len(mine))
		for i := 0; pb_.Next(); {
			for {
				k := i % len(mine)
				if created[k] {
					if call("Delete", mustMarshal(b, &pb.DeleteRequest{MachineId: mine[k]})) {
						created[k] = false
						i++
						break
					}
					i++ // still CREATING: another slot meanwhile
					continue
				}
				if call("Create", mustMarshal(b, &pb.CreateRequest{MachineId: mine[k]})) {
					created[k] = true
					break
				}
				i++
			}
		}
	})
}
