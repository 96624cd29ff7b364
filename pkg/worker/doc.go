// Package worker is the gateway's shared vocabulary for inference workers: a worker's Spec (its
// URL, runtime and KV-event endpoints, parsed from a --worker flag, a YAML config or an admin
// request), its live state (health, this gateway's in-flight requests, the engine's own load,
// the block size learned from events) and Set, an immutable snapshot of the fleet.
//
// It is a leaf package (standard library only) so that pkg/policy and pkg/router can both
// speak about workers without importing each other (DESIGN.md §2). Live counters are atomics on
// *Worker and outlive any Set or picker that refers to them (STYLE.md rule 3); a change to the
// fleet builds a new Set rather than mutating one (rule 2).
package worker
