# Issue 13: where a read's CPU goes. The handler stack of bin/libvirt (the
# same Connect handlers, interceptors and HTTP/2 listener) on an engine of
# 100k slots, driven in one process by grpc-go callers (64 Gets at a time,
# or one full List at a time), profiled with pprof; the summary splits the
# samples by layer (scripts/profile-summary.sh). Profiles stay in
# out/profile/ for `go tool pprof`. Results: docs/benchmarks.md.
.PHONY: bench-profile
PROFILE_OUT := out/profile

bench-profile: deps
	@mkdir -p $(PROFILE_OUT)
	@for b in GetGRPC ListGRPC; do \
		$(GO) test -run '^$$' -bench "^Benchmark$$b$$" -benchmem -benchtime 3s \
			-o $(PROFILE_OUT)/server.test -cpuprofile $(abspath $(PROFILE_OUT))/$$b.cpu \
			-memprofile $(abspath $(PROFILE_OUT))/$$b.mem ./server/ | grep '^Benchmark' || exit 1; \
		echo "--- $$b: CPU by layer"; \
		scripts/profile-summary.sh $(PROFILE_OUT)/server.test $(PROFILE_OUT)/$$b.cpu; \
		echo "--- $$b: bytes allocated by the server's handling of calls, top 8"; \
		$(GO) tool pprof -top -sample_index=alloc_space -nodecount=8 -focus='http2serverConn..runHandler' $(PROFILE_OUT)/server.test \
			$(PROFILE_OUT)/$$b.mem 2>/dev/null | sed -n '/flat%/,$$p'; \
	done

bench: bench-profile
