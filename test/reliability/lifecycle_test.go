//go:build e2e || reliability

package reliability

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// TestAllWorkersDown: with every worker killed the gateway answers 503 with an OpenAI error
// saying no worker is healthy (and /readiness turns 503); when they return it serves again.
func TestAllWorkersDown(t *testing.T) {
	l := newLauncher(t)
	a := startSim(t, l, harness.SimOptions{Name: "a", Events: true, TimeScale: simScale})
	b := startSim(t, l, harness.SimOptions{Name: "b", Events: true, TimeScale: simScale})
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: []string{a.WorkerSpec(true), b.WorkerSpec(true)}, Args: fastHealth})
	body := map[string]any{"model": testModel, "prompt": text("all-down", 40), "max_tokens": 2}
	mustf(t, completion(t, gw.URL, body).Status == http.StatusOK, "gateway not serving before the fault")

	a.Kill()
	b.Kill()
	killedAt := time.Now()
	other := map[int]int{}
	var last result
	detect, ok := poll(10*time.Second, func() bool {
		last = completion(t, gw.URL, body)
		if last.Status != http.StatusServiceUnavailable {
			other[last.Status]++
		}
		return last.Status == http.StatusServiceUnavailable
	})
	mustf(t, ok, "all workers down: last answer %d %s, want 503", last.Status, last.Body)
	typ, code, msg, isErr := apiErr(last.Body)
	mustf(t, isErr && strings.Contains(strings.ToLower(msg), "healthy"), "503 body %s: want an OpenAI error naming the missing healthy worker", last.Body)
	for s := range other {
		mustf(t, s == http.StatusBadGateway, "before detection the gateway answered %d; want only 502 (worker failure)", s)
	}
	var rd result
	_, ok = poll(5*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
		defer cancel()
		rd, _ = do(ctx, http.MethodGet, gw.URL+"/readiness", nil, nil)
		return rd.Status == http.StatusServiceUnavailable
	})
	mustf(t, ok, "/readiness with no healthy worker: %d %s, want 503", rd.Status, rd.Body)
	// Liveness is unaffected: the gateway itself is fine.
	ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
	defer cancel()
	h, err := do(ctx, http.MethodGet, gw.URL+"/health", nil, nil)
	mustf(t, err == nil && h.Status == http.StatusOK, "/health while workers are down: %v %d", err, h.Status)

	restartedAt := time.Now()
	restartSim(t, l, a, "a-restarted")
	restartSim(t, l, b, "b-restarted")
	simsUp := time.Since(restartedAt)
	recover, ok := poll(20*time.Second, func() bool { return completion(t, gw.URL, body).Status == http.StatusOK })
	mustf(t, ok, "gateway never served again after the workers returned")
	report(t, "all_workers_down", "detect_ms", ms(detect), "status", last.Status, "readiness_status", rd.Status, "health_status", h.Status, "error_type", typ, "error_code", code,
		"answers_before_503", fmt.Sprint(other), "workers_restart_ms", ms(simsUp), "recover_after_workers_up_ms", ms(recover),
		"outage_ms", ms(time.Since(killedAt)))
}

// TestGracefulShutdown: SIGTERM stops accepting connections at once, lets every in-flight
// stream finish with [DONE] within --drain-timeout, and the process exits 0. A stream longer
// than the drain deadline ends at the deadline with a gateway_shutting_down error event, and
// the process still exits 0.
func TestGracefulShutdown(t *testing.T) {
	l := newLauncher(t)
	s := startSim(t, l, harness.SimOptions{Name: "sim", Events: true, TimeScale: simScale})

	t.Run("drains in-flight streams", func(t *testing.T) {
		gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: []string{s.WorkerSpec(true)}, Args: []string{"--drain-timeout", "20s"}})
		const streams = 6
		var started sync.WaitGroup
		started.Add(streams)
		results := make([]streamResult, streams)
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
		defer cancel()
		for i := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				once := sync.OnceFunc(started.Done)
				defer once() // a stream that fails before its first event must not block the test
				results[i] = stream(ctx, gw.URL, map[string]any{"model": testModel, "prompt": text(fmt.Sprintf("drain-%d", i), 60), "max_tokens": 250},
					func(string) { once() })
			}()
		}
		started.Wait()
		sigAt := time.Now()
		if err := gw.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		// New connections are refused once the listener is closed (poll: the signal is async).
		refusedAfter, ok := poll(5*time.Second, func() bool {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", gw.Port), time.Second)
			if err != nil {
				return errors.Is(err, syscall.ECONNREFUSED)
			}
			c.Close()
			return false
		})
		mustf(t, ok, "gateway still accepts connections 5 s after SIGTERM")
		wg.Wait()
		for i, r := range results {
			mustf(t, r.done(), "stream %d after SIGTERM: status %d, %d events, err %v, error event %q; want a complete stream", i, r.Status, len(r.Events), r.Err, r.errorEvent())
		}
		select {
		case <-gw.Done():
		case <-time.After(25 * time.Second):
			t.Fatal("gateway still running 25 s after SIGTERM")
		}
		exit := time.Since(sigAt)
		_, werr := gw.Exited()
		mustf(t, werr == nil, "gateway exit after SIGTERM: %v, want status 0", werr)
		completed := 0
		for _, r := range results {
			if r.done() {
				completed++
			}
		}
		report(t, "graceful_shutdown", "streams", streams, "completed", completed, "lost", streams-completed, "exit_error", fmt.Sprint(werr),
			"refused_new_after_ms", ms(refusedAfter), "exit_after_sigterm_ms", ms(exit))
	})

	t.Run("drain deadline bounds the exit", func(t *testing.T) {
		gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway-deadline", Workers: []string{s.WorkerSpec(true)}, Args: []string{"--drain-timeout", "500ms"}})
		ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
		defer cancel()
		var sigAt time.Time
		// ~4000 tokens at ~5 ms each: far longer than the drain deadline.
		r := stream(ctx, gw.URL, map[string]any{"model": testModel, "prompt": text("too-long", 40), "max_tokens": 4000}, func(string) {
			sigAt = time.Now()
			_ = gw.Signal(syscall.SIGTERM)
		})
		mustf(t, !sigAt.IsZero(), "stream never started: %d %q", r.Status, r.Events)
		mustf(t, !r.done(), "a 4000-token stream completed within a 500 ms drain deadline")
		// The cut stream learns why: one OpenAI error event, not a bare disconnect.
		ev := r.errorEvent()
		_, code, _, _ := apiErr([]byte(ev))
		mustf(t, code == "gateway_shutting_down" && r.Events[len(r.Events)-1] == ev,
			"stream cut by the drain deadline: last event %q (err %v), want a gateway_shutting_down error event", r.Events[len(r.Events)-1], r.Err)
		select {
		case <-gw.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("gateway still running 10 s after SIGTERM with a 500 ms drain deadline")
		}
		exit := time.Since(sigAt)
		_, werr := gw.Exited()
		mustf(t, werr == nil, "gateway exit after the drain deadline: %v, want status 0", werr)
		mustf(t, exit < 5*time.Second, "exit took %v with a 500 ms drain deadline", exit)
		report(t, "graceful_shutdown_deadline", "drain_timeout_ms", 500, "exit_after_sigterm_ms", ms(exit), "stream_events_before_cut", len(r.Events), "error_code", code)
	})
}
