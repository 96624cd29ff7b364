// Package testutil holds the process harness shared by the end-to-end tests (test/e2e) and the
// benchmark driver (tools/bench): free loopback ports, building the kvgate binaries once, starting
// a binary with its output captured to a log file, waiting for an HTTP endpoint to become ready
// with a deadline, and stopping processes (SIGTERM, then SIGKILL of the whole process group).
//
// Choose the variant by the caller:
//   - tests use the testing.TB helpers (Start, WaitReady, FreePort): failures are reported with
//     t.Fatalf, processes are stopped by t.Cleanup, and the tail of every log is printed when
//     the test failed;
//   - programs (tools/bench) use the error-returning forms (StartProcess, WaitHTTP, Build) and
//     call (*Process).Stop themselves.
//
// Launcher builds on these to start the kvgate fleet itself with free loopback ports: simulators
// (optionally publishing KV events with replay), gateway replicas, nginx with a given
// configuration, and a Prometheus server; each Start* waits until the process answers.
//
// Nothing here sleeps to synchronise: readiness is polled with a ticker under a deadline, and a
// process's exit is observed on the channel returned by (*Process).Done.
package testutil
