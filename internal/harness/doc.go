// Package harness starts and stops the processes of kvgate's end-to-end tests (test/e2e,
// test/reliability) and of the benchmark driver (tools/bench): free loopback ports, building the
// kvgate binaries once, starting a binary with its output captured to a log file, waiting for an
// HTTP endpoint to become ready with a deadline, and stopping processes (SIGTERM, then SIGKILL of
// the whole process group).
//
// It does not import package testing, so tools/bench (a program, `go run ./tools/bench`) links
// no test code; every function returns an error and the caller stops what it started with
// (*Process).Stop. Tests use the testing.TB wrappers in internal/testutil, which report failures
// with t.Fatal and stop processes in t.Cleanup.
//
// Launcher builds on these to start the kvgate fleet itself with free loopback ports: simulators
// (optionally publishing KV events with replay), gateway replicas, nginx with a given
// configuration, and a Prometheus server; each Start* waits until the process answers.
//
// Nothing here sleeps to synchronise: readiness is polled with a ticker under a deadline, and a
// process's exit is observed on the channel returned by (*Process).Done.
package harness
