package pipeline

import (
	"context"
	"net/http"
	"time"

	"github.com/kvgate/kvgate/pkg/engine"
)

// The access log's view of a request (docs/operations.md, "Access log"). The HTTP surface puts
// a Record in the request's context (WithRecord) when the access log is on; the pipeline fills
// it as the request runs and the surface writes it as one line when the request ends. Off, no
// Record exists and every hook below is one nil check.

// Record is what the pipeline tells the access log about one request.
type Record struct {
	// Model is the served model the request resolved to.
	Model string
	// Worker, Reason and CachedTokens are the last routing decision's: the worker sent to, the
	// policy's reason, and the prompt's leading tokens that worker held (matched blocks × its
	// block size). Attempts counts the sends (2 after a retry).
	Worker       string
	Reason       string
	CachedTokens int
	Attempts     int
	// PromptTokens is the length of the prompt routed on (the first prompt of a batch).
	PromptTokens int
	// PD is a disaggregated pool's split outcome (pair, or why the request ran whole).
	PD string
	// TTFT is the time from arrival to the first byte sent to the client (0: none sent).
	TTFT time.Duration
}

type recordKey struct{}

// WithRecord returns ctx carrying rec for the pipeline to fill.
func WithRecord(ctx context.Context, rec *Record) context.Context {
	return context.WithValue(ctx, recordKey{}, rec)
}

// recordOf returns the Record ctx carries, or nil.
func recordOf(ctx context.Context) *Record {
	rec, _ := ctx.Value(recordKey{}).(*Record)
	return rec
}

// NewCall returns the call of request r arriving now: its headers go to the engines, and it
// joins r's trace and access-log record when those are on.
func (pl *Pipeline) NewCall(r *http.Request) *Call {
	c := &Call{Arrival: time.Now(), Req: engine.Request{Header: r.Header}}
	pl.startTrace(r, c)
	c.rec = recordOf(r.Context())
	return c
}

// recordPrompt notes the prepared call's model and prompt length.
func (c *Call) recordPrompt() {
	if c.rec == nil {
		return
	}
	c.rec.Model = c.Req.Model
	if len(c.Req.Tokens) > 0 {
		c.rec.PromptTokens = len(c.RouteTokens())
	}
}

// recordSend notes a send on dec's worker.
func (c *Call) recordSend(dec *Decision) {
	if c.rec == nil {
		return
	}
	c.rec.Worker, c.rec.Reason, c.rec.CachedTokens = dec.m.Worker().URL(), string(dec.reason), dec.matched*dec.bs
	c.rec.Attempts++
}
