# Hourglass developer entry points. `make help` lists them.
GO       ?= go
DURATION ?= 0

.PHONY: help test soak vet build demo deps clean

help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

deps: ## install from Debian's packages what the tests need and the machine lacks (scripts/install-deps.sh)
	@./scripts/install-deps.sh

# make test lists e2e and the demo first, then the other packages whose
# tests take longest (10-30 s each): go test starts the test binaries in
# the order of its package list, and these take the longest (mostly
# waiting on processes and timers), so the rest runs beside them instead
# of before them, and no long package is left to run alone at the end.
# The tests wait on servers, leases and timers far more than they
# compute, so four test binaries run at once (-p) with up to four
# parallel tests each, on the two-core CI machine too. On that machine
# the suite is bound by CPU, so nothing is compiled twice and nothing
# waits that need not: go test runs the whole of go vet itself
# (-vet=all, as go vet ./... would, with -race: on the packages the
# tests compile, a package's tests starting once it is vetted), so e2e
# starts as soon as what it needs is built and vetted instead of after
# the vet of every package; a vet finding fails its package's tests.
# Test binaries are linked without DWARF (-ldflags=-w): linking is a
# fifth of the suite's CPU on a clean checkout and DWARF a fifth of each
# link, and stack traces and race reports name files and lines from the
# symbol table all the same.
# deploy/'s module, which links none of Hourglass's packages, is checked
# beside the tests, its output printed after theirs (its go test leaves
# out the vet subset that its go vet ran in full). A data race is
# summed up once more at the very end (scripts/race-digest.sh): a log
# cut to its start and end then still shows both sides of the race.
TESTPKGS = ./e2e ./cmd/hourglass-demo ./worker ./internal/shard ./internal/testenv ./internal/scheduler ./...
test: ## gofmt, go vet, every test with the race detector, and deploy/'s checks (make deps first)
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	@out="$$(mktemp)"; log="$$(mktemp)"; rc="$$(mktemp)"; trap 'rm -f "$$out" "$$log" "$$rc"' EXIT; \
	(cd deploy && $(GO) vet ./... && $(GO) test -count=1 -vet=off ./...) >"$$out" 2>&1 & deploy=$$!; \
	echo "$(GO) test -race -ldflags=-w -count=1 -vet=all -timeout 15m -p 4 -parallel 4 $(TESTPKGS)"; \
	{ $(GO) test -race -ldflags=-w -count=1 -vet=all -timeout 15m -p 4 -parallel 4 $(TESTPKGS) 2>&1; echo $$? >"$$rc"; } | tee "$$log"; tests=$$(cat "$$rc"); \
	wait $$deploy; checks=$$?; \
	echo "deploy/ (go vet, go test):"; cat "$$out"; \
	if grep -q '^WARNING: DATA RACE' "$$log"; then echo "the first data race, in short (scripts/race-digest.sh):"; ./scripts/race-digest.sh "$$log"; fi; \
	[ $$tests -eq 0 ] && [ $$checks -eq 0 ]

soak: ## the long forms of the soak tests (TestSoak*: minutes of faults, larger volumes), which make test skips; CI runs them after it
	HGTEST_SOAK=1 $(GO) test -race -ldflags=-w -count=1 -timeout 30m -run '^TestSoak' ./...

build: ## build bin/scheduler, bin/worker, bin/hourglass (the admin CLI) and bin/hourglass-demo
	$(GO) build -o bin/ ./cmd/...

demo: ## run a local Hourglass: redis-server + etcd (installed if missing), 2 schedulers, 2 workers, 200 tasks/s; DURATION=20s bounds it
	@./scripts/install-deps.sh servers
	$(GO) run ./cmd/hourglass-demo -duration $(DURATION)

clean: ## remove built binaries
	rm -rf bin/

.PHONY: bench
bench: ## benchmarks vs asynq and BullMQ (own Redis/etcd; ~20 min on 2 cores); writes bench/results/latest.{json,md}; BENCH_ARGS="-quick" or "-scenarios burst,steady"
	cd bench && $(GO) run . $(BENCH_ARGS)
