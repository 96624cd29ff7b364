// Package discovery turns DNS names into workers (DESIGN.md §12): a --discover spec names a DNS
// name (A/AAAA records, or SRV with srv=true, e.g. a Kubernetes headless Service) and a worker
// spec template whose {host} and {port} each answer fills in; a Watcher re-resolves every spec
// periodically and hands each name's current set of worker specs to its owner (the router's
// SyncWorkers), which adds the new addresses and drains the ones that left.
//
// When a lookup fails (a timeout, a refused or failing server) the last good set stays and the
// failure is logged and counted; a name that does not exist (NXDOMAIN) or has no records is a
// good answer, an empty set. Lookups go to the system's resolver, or with NewResolver to one DNS
// server (a sidecar, a test's): see NewResolver for why the standard library's resolver rather
// than a DNS library.
//
// The package knows workers only as pkg/worker specs; it imports nothing else of kvgate, and
// nothing below it: a membership change moves from cmd/gateway's wiring through here into the
// router, never back up.
package discovery
