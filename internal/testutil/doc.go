// Package testutil holds the testing.TB forms of internal/harness for tests: starting a process
// that t.Cleanup stops (with its log tail printed when the test failed), free loopback ports and
// waiting for a condition (WaitFor), each failing the test with t.Fatal instead of returning an
// error.
//
// Use internal/harness directly where there is no testing.TB (tools/bench, TestMain) or where
// the test wants the error (the fleet's Launcher returns errors so a test can add context).
package testutil
