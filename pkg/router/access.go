package router

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/clientauth"
	"github.com/kvgate/kvgate/pkg/pipeline"
)

// The access log (Config.AccessLog; docs/operations.md, "Access log"): one JSON line per
// request of the public API when it ends, with what the pipeline recorded of it
// (pipeline.Record). Off, instrument does not call it.

// HeaderRequestID names a request in the access log and its answer: the client's value when it
// sent one, else one the gateway draws.
const HeaderRequestID = "X-Request-Id"

// maxRequestID bounds a client's request id the log repeats.
const maxRequestID = 128

// logged runs h and writes the request's access-log line.
func (rt *Router) logged(route string, sw *pipeline.StatusWriter, r *http.Request, h http.HandlerFunc, start time.Time) {
	id := r.Header.Get(HeaderRequestID)
	if id == "" || len(id) > maxRequestID {
		id = newRequestID()
	}
	sw.Header().Set(HeaderRequestID, id)
	rec := &pipeline.Record{}
	h(sw, r.WithContext(pipeline.WithRecord(r.Context(), rec)))
	code := sw.Code
	if code == 0 {
		code = http.StatusOK
	}
	rt.cfg.AccessLog.Info("request", zap.String("request_id", id), zap.String("method", r.Method), zap.String("route", route),
		zap.String("client_key", clientauth.KeyName(r.Context())), zap.String("model", rec.Model), zap.String("worker", rec.Worker),
		zap.String("reason", rec.Reason), zap.String("pd", rec.PD), zap.Int("attempts", rec.Attempts),
		zap.Int("prompt_tokens", rec.PromptTokens), zap.Int("cached_tokens", rec.CachedTokens), zap.Int("status", code),
		zap.Float64("ttft_ms", ms(rec.TTFT)), zap.Float64("duration_ms", ms(time.Since(start))))
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// newRequestID returns 16 random hex digits.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
