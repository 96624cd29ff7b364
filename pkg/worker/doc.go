// Package worker is the gateway's shared vocabulary for inference workers: a worker's Spec (its
// URL, runtime and KV-event endpoints, parsed from a --worker flag, a YAML config or an admin
// request), the Runtime of grpc:// workers (the one table of engine services every gRPC-speaking
// package keys its code by), and a worker's live state (health, this gateway's in-flight
// requests, the engine's own load).
//
// It is a leaf package (standard library only) so that the packages above it can all speak
// about workers without importing each other (DESIGN.md §2). Live counters are atomics on
// *Worker and outlive any snapshot or picker that refers to them (STYLE.md rule 3).
package worker
