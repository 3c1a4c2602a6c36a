# Issue 12: placement throughput and p99 per decision, 1,000 hosts in one
# zone, 64 concurrent Creates (backend/placement) and the same through the
# fake backend's Create/Delete (backend/fake). Target: p99 < 1 ms.
.PHONY: bench-placement
bench-placement:
	$(GO) test -run '^$$' -bench 'BenchmarkPlacement|BenchmarkFakeCreate' -benchtime 2s -timeout 5m ./backend/placement/ ./backend/fake/

bench: bench-placement

# A make test stage (CI): placement and the fake's hosts under the race
# detector (concurrent reservations never oversubscribe a host), the
# engine's placement tests, and 15 s of fuzzing the --hosts parser.
.PHONY: test-placement
test-placement: deps
	@mkdir -p out
	$(GOTEST) -count=1 -race ./backend/placement/ ./backend/fake/ ./backend/hostsfile/
	$(GO) test -count=1 -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 15s ./backend/hostsfile/
