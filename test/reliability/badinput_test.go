//go:build e2e || reliability

package reliability

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/testutil"
)

// TestBadInput: hostile HTTP requests get OpenAI-style errors with the right status while
// concurrent good requests keep succeeding, and slowloris connections are cut by the server's
// header timeout.
func TestBadInput(t *testing.T) {
	l := newLauncher(t)
	s := startSim(t, l, harness.SimOptions{Name: "sim", TimeScale: simScale})
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: []string{s.WorkerSpec(false)},
		Args: []string{"--max-body-bytes", fmt.Sprint(1 << 20), "--max-prompt-tokens", "2000", "--max-n", "4"}})

	stop := make(chan struct{})
	var load loadResult
	wait := backgroundLoad(gw.URL, 3, 5000, stop, &load)
	stopLoad := func() { close(stop); wait() }

	// Slowloris: connections that never finish their headers; they must not keep the good
	// requests from being served, and the server must close them.
	const slow = 64
	var conns []net.Conn
	for range slow {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", gw.Port), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
		conns = append(conns, c)
	}
	slowStart := time.Now()
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	cases := []struct {
		name   string
		body   string
		status int
	}{
		{"malformed JSON", `{"model":"` + testModel + `","prompt":"x"`, 400},
		{"not an object", `[1,2,3]`, 400},
		{"invalid UTF-8", "{\"model\":\"" + testModel + "\",\"prompt\":\"bad \xff\xfe bytes\"}", 400},
		{"deeply nested prompt", `{"model":"` + testModel + `","prompt":` + deep + `}`, 400},
		{"deeply nested field", `{"model":"` + testModel + `","prompt":"x","user":` + deep + `}`, 400},
		{"huge body", `{"model":"` + testModel + `","prompt":"` + strings.Repeat("a ", 1<<20) + `"}`, 413},
		{"n too large", `{"model":"` + testModel + `","prompt":"x","n":1000000}`, 400},
		{"max_tokens too large", `{"model":"` + testModel + `","prompt":"x","max_tokens":1000000000000}`, 400},
		{"negative max_tokens", `{"model":"` + testModel + `","prompt":"x","max_tokens":-1}`, 400},
		{"wrong type", `{"model":"` + testModel + `","prompt":{"a":1}}`, 400},
		{"prompt past the limit", `{"model":"` + testModel + `","prompt":"` + text("long", 3000) + `"}`, 413},
		{"token ids out of vocabulary", `{"model":"` + testModel + `","prompt":[4294967295]}`, 400},
		{"unknown model", `{"model":"nope","prompt":"x"}`, 404},
		{"empty body", ``, 400},
	}
	var got []string // the statuses observed, per case
	for _, c := range cases {
		var observed []int
		t.Run(c.name, func(t *testing.T) {
			for range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
				r, err := do(ctx, http.MethodPost, gw.URL+"/v1/completions", []byte(c.body), nil)
				cancel()
				if err != nil {
					t.Fatalf("%v", err)
				}
				observed = append(observed, r.Status)
				typ, _, msg, ok := apiErr(r.Body)
				if r.Status != c.status || !ok {
					t.Fatalf("got %d %.300s, want %d with an OpenAI error", r.Status, r.Body, c.status)
				}
				if strings.Contains(msg, "\xff") || len(msg) > 2000 {
					t.Errorf("error message echoes the bad input: %.200q", msg)
				}
				_ = typ
			}
		})
		// Run-length encoded in order: "400×5", or e.g. "400×2+500×1" before a failure.
		var seen []string
		for i := 0; i < len(observed); {
			j := i
			for j < len(observed) && observed[j] == observed[i] {
				j++
			}
			seen = append(seen, fmt.Sprintf("%d×%d", observed[i], j-i))
			i = j
		}
		got = append(got, strings.ReplaceAll(c.name, " ", "_")+":"+strings.Join(seen, "+"))
	}

	// The slowloris connections are closed by the server (ReadHeaderTimeout), bounded here.
	closed := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(c)
		_, err := br.ReadByte()
		if err == io.EOF || err == nil { // EOF: closed; a byte: a 408 before closing
			closed++
		}
	}
	cut := time.Since(slowStart)
	mustf(t, closed == slow, "%d of %d slowloris connections closed by the server within 20 s", closed, slow)

	stopLoad()
	mustf(t, load.failed.Load() == 0, "%d good requests failed during the bad-input barrage: %v", load.failed.Load(), load.failures)
	mustf(t, load.ok.Load() > 0, "no good request completed during the barrage")
	var h result
	ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
	defer cancel()
	h, err := do(ctx, http.MethodGet, gw.URL+"/health", nil, nil)
	mustf(t, err == nil && h.Status == http.StatusOK, "gateway unhealthy after bad input: %v %d", err, h.Status)
	report(t, "bad_input_http", "cases", len(cases), "requests", 5*len(cases), "statuses", strings.Join(got, ","),
		"slowloris_conns", slow, "slowloris_closed", closed, "slowloris_cut_ms", ms(cut),
		"good_ok", load.ok.Load(), "good_failed", load.failed.Load())
}

// TestAdminSecurity: the admin API is on the admin listener only (the API listener answers it
// 404); with an admin token, /workers and /debug/route need it; worker URLs are validated
// (schemes; no credentials), and a password in a rejected URL never appears in the response,
// the logs or the metrics.
func TestAdminSecurity(t *testing.T) {
	l := newLauncher(t)
	s := startSim(t, l, harness.SimOptions{Name: "sim", TimeScale: simScale})
	const token, secret = "admin-token-123", "S3cretPassw0rd"
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: []string{s.WorkerSpec(false)},
		Args: []string{"--admin-token", token}})
	callOn := func(base, method, path, body, tok string) result {
		t.Helper()
		hdr := map[string]string{}
		if tok != "" {
			hdr["Authorization"] = "Bearer " + tok
		}
		ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
		defer cancel()
		r, err := do(ctx, method, base+path, []byte(body), hdr)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	call := func(method, path, body, tok string) result {
		t.Helper()
		return callOn(gw.AdminURL, method, path, body, tok)
	}
	denied := 0
	for _, p := range []struct{ method, path, body string }{
		{http.MethodGet, "/workers", ""},
		{http.MethodPost, "/workers", `{"url":"http://127.0.0.1:1"}`},
		{http.MethodDelete, "/workers?url=" + s.URL, ""},
		{http.MethodGet, "/debug/route?prompt=hello", ""},
	} {
		for _, tok := range []string{"", "wrong", token + "x"} {
			r := call(p.method, p.path, p.body, tok)
			_, _, _, ok := apiErr(r.Body)
			mustf(t, r.Status == http.StatusUnauthorized && ok, "%s %s with token %q: %d %s, want 401 OpenAI error", p.method, p.path, tok, r.Status, r.Body)
			denied++
		}
		for _, tok := range []string{"", token} {
			r := callOn(gw.URL, p.method, p.path, p.body, tok)
			mustf(t, r.Status == http.StatusNotFound, "%s %s on the API listener: %d %s, want 404", p.method, p.path, r.Status, r.Body)
			denied++
		}
	}
	mustf(t, call(http.MethodGet, "/workers", "", token).Status == http.StatusOK, "GET /workers with the token refused")
	mustf(t, call(http.MethodGet, "/debug/route?prompt=hello", "", token).Status == http.StatusOK, "/debug/route with the token refused")
	// The worker survived the unauthorised DELETE.
	mustf(t, completion(t, gw.URL, map[string]any{"model": testModel, "prompt": "x", "max_tokens": 2}).Status == http.StatusOK, "serving broke")

	rejected := 0
	for _, body := range []string{
		`{"url":"ftp://127.0.0.1:21"}`,
		`{"url":"file:///etc/passwd"}`,
		`{"url":"javascript:alert(1)"}`,
		`{"url":"http://user:` + secret + `@127.0.0.1:9"}`,
		`{"url":"grpc://user:` + secret + `@127.0.0.1:9","runtime":"vllm"}`,
		`{"url":"http://127.0.0.1:9","kv_events":"tcp://u:` + secret + `@127.0.0.1:5557"}`,
		`{"url":"http://127.0.0.1:9","kv_events":"http://127.0.0.1:5557"}`,
		`url=http://admin:` + secret + `@127.0.0.1:9`,
	} {
		r := call(http.MethodPost, "/workers", body, token)
		mustf(t, r.Status == http.StatusBadRequest, "POST /workers %s: %d %s, want 400", body, r.Status, r.Body)
		mustf(t, !strings.Contains(string(r.Body), secret), "POST /workers echoed the password: %s", r.Body)
		rejected++
	}
	// A gateway started with a credential in a --worker flag refuses to start without echoing it.
	port := testutil.FreePort(t)
	p, err := harness.Start(harness.Command{Name: "gateway-bad-flag", Path: bins.Gateway, Args: []string{"--host", "127.0.0.1", "--port", fmt.Sprint(port), "--prometheus-port", "-1",
		"--tokenizer", tokenizerPath, "--worker", "url=http://admin:" + secret + "@127.0.0.1:9"}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(startTimeout):
		p.Kill()
		t.Fatal("gateway with a credential in --worker did not exit")
	}
	_, exitErr := p.Exited()
	mustf(t, exitErr != nil, "gateway with a credential in --worker exited 0")
	flagLog := p.LogTail(1 << 16)
	mustf(t, !strings.Contains(strings.SplitN(flagLog, "\n", 2)[1], secret), "gateway echoed the password on stderr: %s", flagLog)

	metricsText := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
		defer cancel()
		r, err := do(ctx, http.MethodGet, gw.MetricsURL(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(r.Body)
	}
	mustf(t, !strings.Contains(metricsText(), secret), "/metrics contains the password")
	logText, err := os.ReadFile(gw.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	mustf(t, !strings.Contains(string(logText), secret), "gateway log contains the password")
	report(t, "admin_security", "unauthorised_denied", denied, "bad_worker_urls_rejected", rejected, "password_in_responses_logs_metrics", 0,
		"bad_flag_exit", fmt.Sprint(exitErr != nil))
}
