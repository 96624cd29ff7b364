// Command bench drives kvgate's demo and benchmark: it starts real processes on loopback
// (simulators publishing KV events with replay, gateway replicas, and for the benchmark a real
// nginx round-robin in front, rendered from deploy/nginx/kvgate.conf.tmpl), runs cmd/loadgen
// once per configuration against a fresh fleet, prints a comparison table and one
// machine-readable RESULT line per configuration, and stops everything.
//
//	go run ./tools/bench demo   [flags]   # make demo: 3 simulators + 1 gateway, 3 policies, < 2 min
//	go run ./tools/bench bench  [flags]   # make bench: DESIGN §9 workload, 3 policies × 1/2/4
//	                                       # replicas behind nginx; writes docs/benchmarks.md + .png
//	go run ./tools/bench nginx-conf -listen 80 HOST:PORT...   # the nginx config for N replicas
//
// Configurations: round_robin (index=none), cache_aware with --kv-index off (index=approx: the
// approximate tree every replica builds from its own decisions) and cache_aware with events
// (index=events). The fleet is identical in all three; only the gateway flags differ, and every
// configuration starts from cold simulators so no run inherits another's cache.
//
// The binaries come from --bin (default bin/, what `make build` writes); the tokenizer from
// --tokenizer (default .cache/tokenizers/qwen3/tokenizer.json, fetched by tools/testdata.sh).
//
// Every process is started through internal/harness, and bench exits non-zero, listing them,
// when any process it started (nginx workers included) is still running at the end (issue 17).
package main
