# Floodgate's tasks. `make test` is the README's test command.

GO ?= go

.PHONY: run test test-short vet bench bench-compare bench-lib bench-services lint image

## run: the service on its embedded in-memory default (no Redis needed).
run:
	$(GO) run ./cmd/floodgate serve

## test: every test, with the race detector, in shuffled order: this
## module's (and the tests that skip themselves under the detector again
## without it: allocation counts, memory per entry, batching; the detector
## changes what they count; TestMakeTestRunsRaceSkippedTests checks the
## pattern), then the benchmark harness's (its own
## module, bench/), then the deploy kit's (its own module, deploy/: image,
## manifests, Envoy, compose). -timeout 30m: cmd/floodgate's tests (over
## a hundred processes started and stopped) take 9 to 10 minutes under the
## detector on two loaded cores, at go test's default 10 minute limit.
test:
	$(GO) test -race -shuffle=on -count=1 -timeout 30m ./...
	$(GO) test -count=1 -run 'Allocat|Batching|MemoryPer|LeaderAfterBatch' ./...
	cd bench && $(GO) test -race -shuffle=on -count=1 -timeout 30m ./...
	cd deploy && $(GO) test -race -shuffle=on -count=1 -timeout 30m ./...

## test-short: the tests that need no redis-server.
test-short:
	$(GO) test -short -count=1 ./...

## vet: fails when gofmt -l lists files (gofmt -l itself exits 0), then
## go vet.
vet:
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt -l: not formatted (run gofmt -w on them):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

## lint: staticcheck (installed from the module proxy).
lint:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd deploy && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

## image: the container image, from a binary compiled here (podman or docker;
## see docs/deploy.md).
image:
	bash deploy/build-image.sh

## bench: this module's Go benchmarks (stores, algorithms).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./memstore/ ./redisstore/

## bench-compare: the side-by-side comparison with other Go limiters.
bench-compare:
	cd bench && $(GO) run . -out ../docs

## bench-lib: the cells of issue 18's library targets (1, 64 and 256 callers;
## redis_rate, bare EVALSHA, sliding window, GCRA, three layers; five rounds of
## 3 s, about 5 minutes; prints Markdown with client and server CPU per decision).
bench-lib:
	cd bench && $(GO) run . -only redis_rate,tiny,fg-sw,fg-gcra,fg-layers -concurrency 1,64,256 -rounds 5 -duration 3s -skip algorithms,redis-benchmark,memory,inmemory,flood,hotkey

## bench-services: envoyproxy/ratelimit, serve and envoy-compat side by side
## (about 6 minutes; writes between the servicebench markers of docs/benchmarks.md).
bench-services:
	cd bench && $(GO) run ./cmd/servicebench -out ../docs/benchmarks.md
