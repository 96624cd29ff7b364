package worker

import (
	"errors"
	"sync/atomic"
	"time"
)

// Fleet errors, wrapped by the owners of a worker list (the router) so that callers can tell a
// conflict from a miss with errors.Is.
var (
	// ErrDuplicate: a worker with that URL is already in the fleet.
	ErrDuplicate = errors.New("worker already exists")
	// ErrNotFound: no worker has that URL.
	ErrNotFound = errors.New("worker not found")
)

// Worker is one configured worker and its live state. The Spec is immutable; everything else is
// atomics readable and writable from any goroutine without locks. A Worker outlives the Sets
// that refer to it, so load counters survive fleet changes (STYLE.md rule 3).
//
// A Worker must not be copied; use it through a pointer.
type Worker struct {
	// The fields a routing decision reads for every candidate come first, together, with
	// copies of the two spec fields it reads (specModel, role): at thousands of workers a
	// decision is a few passes over every worker's state, and costs about the cache lines it
	// touches (docs/scaling.md).
	key        uint64
	inflight   atomic.Int64
	prefill    atomic.Int64 // blocks in-flight requests must still prefill (Hold.Prefill)
	active     atomic.Int64 // prompt blocks of in-flight requests (Hold.Blocks)
	engineLoad atomic.Int64 // running+waiting from the engine; -1 = unknown
	engineAt   atomic.Int64 // unix nanos of the last engine-load sample
	healthy    atomic.Bool
	checked    atomic.Bool // at least one health check finished
	failures   atomic.Int32
	adapters   atomic.Pointer[[]string] // LoRA adapters the worker lists; nil = none known
	model      atomic.Pointer[string]
	specModel  string // spec.Model
	role       Role   // spec.Role

	engineWait atomic.Int64 // of which waiting in the engine's own queue
	served     atomic.Int64 // unix nanos of the last answer a request got from it (MarkServed)
	healthMsg  atomic.Pointer[string]
	spec       Spec
}

// New returns a Worker for a spec, which it normalizes. The worker starts unhealthy and
// unchecked: the router's first health check brings it in.
func New(spec Spec) (*Worker, error) {
	spec, err := spec.Normalize()
	if err != nil {
		return nil, err
	}
	w := &Worker{spec: spec, key: keyOf(spec.URL), specModel: spec.Model, role: spec.Role}
	w.engineLoad.Store(-1)
	return w, nil
}

// Spec returns the worker's normalized spec.
func (w *Worker) Spec() Spec { return w.spec }

// URL returns the worker's normalized URL, which identifies it in the fleet, in metrics labels
// and in logs. It never contains credentials (Normalize rejects them).
func (w *Worker) URL() string { return w.spec.URL }

// Role returns the worker's role in prefill/decode disaggregation (Spec.Role).
func (w *Worker) Role() Role { return w.role }

// Kind returns the worker's protocol.
func (w *Worker) Kind() Kind { return w.spec.Kind() }

// Key returns the worker's stable hash identity: FNV-1a of URL(), the same on every gateway
// replica, so rendezvous hashing agrees without shared state.
func (w *Worker) Key() uint64 { return w.key }

// Hold is the load one request holds on a worker from its pick until it ends, in KV blocks
// of the gateway's block size. Both parts are this gateway's own view: other replicas' requests
// are not in them.
type Hold struct {
	// Prefill is the blocks the worker must compute before the request's first token: its
	// prompt blocks minus those the worker was scored as holding. It is released at the first
	// token (Prefilled), or with the rest when the request ends earlier.
	Prefill int64
	// Blocks is the request's prompt blocks, the KV it occupies while it runs (the output's
	// blocks are left out: the gateway does not know how long it will be).
	Blocks int64
}

// Acquire counts one request started on the worker, holding h. Each Acquire must be matched by
// exactly one Release of the same h; policy.Take and policy.Result.Done pair them for the
// router.
func (w *Worker) Acquire(h Hold) {
	w.inflight.Add(1)
	w.prefill.Add(h.Prefill)
	w.active.Add(h.Blocks)
}

// Prefilled releases n prefill blocks of a request whose first token arrived; the Release of
// its Hold must then carry Prefill reduced by n.
func (w *Worker) Prefilled(n int64) { w.prefill.Add(-n) }

// Release ends a request counted by Acquire; h is what it still holds.
func (w *Worker) Release(h Hold) {
	w.inflight.Add(-1)
	w.prefill.Add(-h.Prefill)
	w.active.Add(-h.Blocks)
}

// MarkServed records that a request got the first piece of its answer from the worker at t:
// the passive evidence that it serves, which a failed health check is weighed against.
func (w *Worker) MarkServed(t time.Time) { w.served.Store(t.UnixNano()) }

// LastServed returns when a request last got an answer from the worker (the zero time: never).
func (w *Worker) LastServed() time.Time {
	if t := w.served.Load(); t != 0 {
		return time.Unix(0, t)
	}
	return time.Time{}
}

// InFlight returns this gateway's requests currently outstanding on the worker.
func (w *Worker) InFlight() int64 { return w.inflight.Load() }

// PendingPrefill returns the blocks this gateway's in-flight requests on the worker must still
// prefill: the prefill queue ahead of a new request, in blocks.
func (w *Worker) PendingPrefill() int64 { return w.prefill.Load() }

// ActiveBlocks returns the prompt blocks of this gateway's in-flight requests on the worker.
func (w *Worker) ActiveBlocks() int64 { return w.active.Load() }

// SetEngineLoad records the engine's own running+waiting count sampled at t; a negative n marks
// it unknown (scrape failed).
func (w *Worker) SetEngineLoad(n int64, t time.Time) {
	if n < 0 {
		n = -1
	}
	w.engineLoad.Store(n)
	w.engineAt.Store(t.UnixNano())
}

// SetEngineWaiting records how many of the engine's requests wait in its own queue, sampled
// with the next SetEngineLoad (which it must precede: that call stamps the sample's time).
func (w *Worker) SetEngineWaiting(n int64) { w.engineWait.Store(max(n, 0)) }

// EngineWaiting returns the engine's waiting requests of the last sample when it is known and
// fresher than maxAge at now (maxAge ≤ 0: never).
func (w *Worker) EngineWaiting(now time.Time, maxAge time.Duration) (int64, bool) {
	if maxAge <= 0 || w.engineLoad.Load() < 0 || now.UnixNano()-w.engineAt.Load() > int64(maxAge) {
		return 0, false
	}
	return w.engineWait.Load(), true
}

// EngineLoad returns the last engine running+waiting sample and when it was taken; ok is false
// when no valid sample exists.
func (w *Worker) EngineLoad() (n int64, at time.Time, ok bool) {
	n = w.engineLoad.Load()
	if n < 0 {
		return 0, time.Time{}, false
	}
	return n, time.Unix(0, w.engineAt.Load()), true
}

// Load returns the load a policy sees: this gateway's in-flight count, or the engine's
// running+waiting when that is known, fresher than maxAge at now, and larger. The engine count
// already includes this gateway's requests and every other replica's, so the two are combined
// by max, not summed: in-flight reacts instantly, the engine count is the shared truth.
func (w *Worker) Load(now time.Time, maxAge time.Duration) int64 {
	l := w.inflight.Load()
	if e := w.engineLoad.Load(); e > l && maxAge > 0 && now.UnixNano()-w.engineAt.Load() <= int64(maxAge) {
		return e
	}
	return l
}

// Healthy reports whether the worker may receive requests.
func (w *Worker) Healthy() bool { return w.healthy.Load() }

// Checked reports whether at least one health check has finished.
func (w *Worker) Checked() bool { return w.checked.Load() }

// SetHealth records a health check (or a passive failure seen by a request) and reports whether
// the healthy state changed. msg is a short reason shown by the admin API ("" when healthy).
// A failure marks the worker down at once; this is deliberate: a request that fails before its
// first byte is retried elsewhere, and the next successful check brings the worker back.
func (w *Worker) SetHealth(ok bool, msg string) (changed bool) {
	w.checked.Store(true)
	if ok {
		w.failures.Store(0)
	} else {
		w.failures.Add(1)
	}
	if msg == "" {
		w.healthMsg.Store(nil)
	} else {
		w.healthMsg.Store(&msg)
	}
	return w.healthy.Swap(ok) != ok
}

// HealthMessage returns the reason of the last failed check, or "".
func (w *Worker) HealthMessage() string {
	if p := w.healthMsg.Load(); p != nil {
		return *p
	}
	return ""
}

// Failures returns the number of consecutive failed checks.
func (w *Worker) Failures() int { return int(w.failures.Load()) }

// SetReportedModel records the model name the worker itself reports (/v1/models or
// GetModelInfo).
func (w *Worker) SetReportedModel(name string) {
	if name == "" {
		w.model.Store(nil)
		return
	}
	w.model.Store(&name)
}

// ReportedModel returns the model name the worker reported, or "".
func (w *Worker) ReportedModel() string {
	if p := w.model.Load(); p != nil {
		return *p
	}
	return ""
}

// SetAdapters records the LoRA adapters the worker lists beside its base model (vLLM's
// /v1/models cards with a "parent"). The slice is copied; nil or empty clears the list.
func (w *Worker) SetAdapters(names []string) {
	if len(names) == 0 {
		w.adapters.Store(nil)
		return
	}
	c := append([]string(nil), names...)
	w.adapters.Store(&c)
}

// Adapters returns the LoRA adapters the worker lists, or nil. The caller must not modify it.
func (w *Worker) Adapters() []string {
	if p := w.adapters.Load(); p != nil {
		return *p
	}
	return nil
}

// HasAdapter reports whether the worker lists name as a LoRA adapter. It does not allocate.
func (w *Worker) HasAdapter(name string) bool {
	p := w.adapters.Load()
	if p == nil || name == "" {
		return false
	}
	for _, a := range *p {
		if a == name {
			return true
		}
	}
	return false
}

// Serves reports whether the worker serves the requested model name, given the gateway's own
// served name def: a worker whose spec names a model serves that name; one without serves def;
// every worker also answers to the name it reports itself and to the LoRA adapters it lists.
func (w *Worker) Serves(model, def string) bool {
	if model == "" {
		model = def
	}
	if w.HasAdapter(model) {
		return true
	}
	if w.specModel != "" {
		if model == w.specModel {
			return true
		}
	} else if model == def {
		return true
	}
	rm := w.ReportedModel()
	return rm != "" && rm == model
}

// ServedModel returns the public name the gateway lists for the worker: the spec's model, else
// def, else the reported name.
func (w *Worker) ServedModel(def string) string {
	switch {
	case w.spec.Model != "":
		return w.spec.Model
	case def != "":
		return def
	}
	return w.ReportedModel()
}

// UpstreamModel returns the model name to put in requests sent to the worker: requested
// unchanged when it names one of the worker's LoRA adapters, else the name the worker reports
// itself when known, else its spec's, else requested.
func (w *Worker) UpstreamModel(requested string) string {
	if w.HasAdapter(requested) {
		return requested
	}
	if rm := w.ReportedModel(); rm != "" {
		return rm
	}
	if w.spec.Model != "" {
		return w.spec.Model
	}
	return requested
}
