//go:build e2e || reliability

// Package reliability is kvgate's fault-injection suite (issue 8): real gateway, simulator and
// kvbridge processes on loopback, with faults injected by killing, restarting and signalling
// processes, by the simulator's fault switches (dropped event batches, publisher restarts) and
// by raw ZMQ publishers and HTTP clients written in the tests. Every scenario checks what must
// hold (no lost requests, bounded detection and recovery, the gateway's index agreeing with the
// engines' real caches) and prints one line
//
//	RELIABILITY scenario=NAME key=value ...
//
// with the numbers it measured (docs/reliability.md collects them).
//
// Build tags choose the variant: `-tags e2e` runs the fast scenarios (part of `make test`);
// `-tags reliability` (make reliability) runs everything, including the 5-minute soak. Every
// wait is a poll with a deadline; every loop is bounded in count and time. TestMain fails the
// run when a process the suite started outlives it (internal/harness.CheckNoSurvivors).
package reliability
