// Package fleetpub measures one gateway process fed the KV-event streams of a large synthetic
// fleet (docs/scaling.md; tools/fleetpub is its command, and the reliability suite runs its
// fault phase). It binds one ZMQ publisher per simulated engine (internal/fleetsim: H100-class
// caches, about 1500 block events per second per worker in batches of 16–64) and serves each
// engine's /health and /v1/completions from a tiny in-process HTTP worker, starts `gateway`
// with every worker (through internal/harness), fills every cache, encodes the messages of
// the measured phases ahead of time (so that publishing costs three sends per message and the
// publisher leaves the cores to the gateway), measures the gateway idle, then publishes the
// steady-state streams while sending 4096-token completions, and reports the gateway's CPU
// (its own process_cpu_seconds_total, not the machine's), its live heap per (worker, block)
// and its lookup latency.
//
// With a fault phase (Faults), the streams go on while one engine in ten flaps and then every
// publisher goes away at once and comes back (a partition healing): the report says what that
// cost, whether routing stalled (lookup and completion latency, failed completions), what the
// gateway counted, how long it took to have every stream up again, and whether memory,
// goroutines or descriptors grew.
package fleetpub
