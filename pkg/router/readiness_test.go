package router

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	kvtest "github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pkg/kvbridge"
)

// TestReadinessWaitsForEventStreams: a gateway whose workers are healthy answers /readiness
// with 503 while a configured event stream has not connected (DESIGN.md §7: a restarting
// replica stays out of rotation until its streams are up), and 200 once its publisher is
// there. Without the gate it would be ready as soon as the health checks passed.
func TestReadinessWaitsForEventStreams(t *testing.T) {
	a, b := newFakeWorker(t, "m"), newFakeWorker(t, "m")
	_, pubA, repA := startPublisher(t)
	// b's engine publishes on a port where nothing listens yet.
	epB := fmt.Sprintf("tcp://127.0.0.1:%d", kvtest.FreePort(t))
	g := newTestGateway(t, testConfig{}, "url="+a.url()+",kv_events="+pubA+",replay="+repA, "url="+b.url()+",kv_events="+epB)
	g.waitFor(t, "a's event stream up", func() bool {
		m := g.member(a.url())
		st, _ := m.StreamState()
		return st == kvbridge.StreamUp
	})

	// Every worker is healthy (newTestGateway waited) and a's stream is up: only b's stream
	// holds readiness back.
	status, reason := readiness(t, g)
	if status != http.StatusServiceUnavailable || !strings.Contains(reason, "event stream of "+b.url()) {
		t.Fatalf("with b's stream not connected: got %d %q, want 503 naming b's event stream", status, reason)
	}

	p, err := kvbridge.NewPublisher(kvbridge.PublisherConfig{Endpoint: epB, Mode: kvbridge.PubBind})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; p.Close() })
	g.waitFor(t, "ready once b's publisher is up", func() bool {
		status, _ := readiness(t, g)
		return status == http.StatusOK
	})
}

// readiness returns GET /readiness's status and reason.
func readiness(t *testing.T, g *testGateway) (int, string) {
	t.Helper()
	resp, body := g.do(t, http.MethodGet, "/readiness", "", "")
	var v struct {
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("/readiness body %q: %v", body, err)
	}
	return resp.StatusCode, v.Reason
}
