# Issue 12: placement throughput and p99 per decision, 1,000 hosts in one
# zone, 64 concurrent Creates (backend/placement) and the same through the
# fake backend's Create/Delete (backend/fake). Target: p99 < 1 ms.
.PHONY: bench-placement
bench-placement:
	$(GO) test -run '^$$' -bench 'BenchmarkPlacement|BenchmarkFakeCreate' -benchtime 2s -timeout 5m ./backend/placement/ ./backend/fake/

bench: bench-placement
