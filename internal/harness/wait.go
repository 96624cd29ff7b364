package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// pollInterval is how often WaitHTTP retries.
const pollInterval = 50 * time.Millisecond

// WaitHTTP polls GET url until it answers with status want, ctx is done, or proc (when not nil)
// exits. It returns nil on success, and otherwise an error naming the last status or error
// seen, so a timeout says why.
func WaitHTTP(ctx context.Context, url string, want int, proc *Process) error {
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	return WaitHTTPClient(ctx, client, url, want, proc)
}

// WaitHTTPClient is WaitHTTP with the given client (say, one that trusts a test CA).
func WaitHTTPClient(ctx context.Context, client *http.Client, url string, want int, proc *Process) error {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var procDone <-chan struct{}
	if proc != nil {
		procDone = proc.Done()
	}
	last := "no attempt"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("harness: wait %s: %w", url, err)
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			last = fmt.Sprintf("status %d", resp.StatusCode)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("harness: wait %s for status %d: %w (last: %s)", url, want, ctx.Err(), last)
		case <-procDone:
			return fmt.Errorf("harness: wait %s: process %s exited (last: %s)", url, proc.Name, last)
		case <-ticker.C:
		}
	}
}

// Eventually polls cond every pollInterval until it returns true or timeout passes, and
// reports whether it became true. It is for conditions with no event to wait on, such as a
// health checker noticing a dead worker.
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-deadline.C:
			return cond()
		case <-ticker.C:
		}
	}
}
