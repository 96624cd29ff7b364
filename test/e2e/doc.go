// Package e2e holds kvgate's end-to-end tests: the real gateway, simworker and loadgen binaries,
// built once in TestMain, run as separate processes on loopback ports, with a real nginx and a
// real Prometheus server (Debian packages) and the official openai npm client where a test
// needs them. The tests are behind the e2e build tag:
//
//	go test -tags e2e -count=1 ./test/e2e
//
// (`make e2e` and `make test` run them after installing what they need). Each test is bounded
// to about two minutes and cleans up every process it started; TestMain fails the run when any
// process started by it (or by those processes, such as tools/bench's fleet) is still running
// at the end (internal/harness.CheckNoSurvivors, issue 17).
package e2e
