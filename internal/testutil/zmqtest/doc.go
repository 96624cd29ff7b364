// Package zmqtest holds the ZMQ socket helpers shared by the tests of packages that speak ZMQ
// (pkg/kvbridge, pkg/sim): a socket closed when the test ends, and a bounded receive.
//
// It is separate from internal/harness (the process harness used by tools/bench and the
// end-to-end tests) and internal/testutil so neither links libzmq through cgo.
package zmqtest
