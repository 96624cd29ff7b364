package kvbridge

import "runtime"

// applySlots bounds how many sources, ZMQ and gRPC alike, decode and apply batches at once to
// GOMAXPROCS − 1 (at least 1), so that event processing never holds every P. When a partition heals, every
// subscriber replays its outage together: without the bound, hundreds of consumer goroutines
// are runnable at once and a request's handler waits behind them in the scheduler's run
// queues (the fault phase's lookup p99 rose from ~0.3 to 6 ms at 64 engines on 2 cores).
// With it, the rest of the gateway always finds a P within one batch. A source waiting for a
// slot is parked, not spinning; its messages wait in its queue and in libzmq, as they would
// behind a busy core.
var applySlots = newSlots(max(1, runtime.GOMAXPROCS(0)-1))

type slots chan struct{}

func newSlots(n int) slots { return make(slots, n) }

func (s slots) acquire() { s <- struct{}{} }
func (s slots) release() { <-s }
