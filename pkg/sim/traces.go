package sim

import (
	"encoding/json"
	"net/http"
	"sync"
)

// maxTraceparents bounds the W3C traceparents a server remembers (the most recent).
const maxTraceparents = 64

// traceLog is the traceparent header of the latest generation requests, as an engine that
// traces would have joined them, for tests that check the gateway's propagation
// (GET /debug/traceparents).
type traceLog struct {
	mu   sync.Mutex
	seen []string
}

// note records r's traceparent, if any.
func (l *traceLog) note(r *http.Request) {
	tp := r.Header.Get("Traceparent")
	if tp == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.seen) == maxTraceparents {
		l.seen = append(l.seen[:0], l.seen[1:]...)
	}
	l.seen = append(l.seen, tp)
}

// handleTraceparents answers a JSON list of the remembered traceparents, oldest first.
func (s *Server) handleTraceparents(w http.ResponseWriter, _ *http.Request) {
	s.traces.mu.Lock()
	b, _ := json.Marshal(append([]string{}, s.traces.seen...))
	s.traces.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}
