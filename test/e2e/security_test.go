//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/testutil"
)

// Secrets of the security run. Each is a distinct, greppable string; none may appear in any log,
// metric or response of the run (TestSecurity's last step).
const (
	secClientKeyA   = "sk-client-alpha-7Qm2"
	secClientKeyB   = "sk-client-bravo-9Xr4"
	secWrongKey     = "sk-client-wrong-3Kd8"
	secLimitKey     = "sk-client-limit-5Wp1"
	secLimitKey2    = "sk-client-limit2-8Ht6"
	secAdminToken   = "adm-token-2Zc7Lq"
	secUpstreamKey  = "sk-upstream-engine-4Nv5"
	securityModelKS = "keyed"
)

// securityRun collects what the run saw, for the leak check: every response body and header.
type securityRun struct {
	mu        sync.Mutex
	responses bytes.Buffer
	results   []string
}

// call sends a request and records the response.
func (s *securityRun) call(t *testing.T, method, u, body string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, u, err)
	}
	s.record(resp.Header, b)
	return resp.StatusCode, resp.Header, b
}

func (s *securityRun) record(h http.Header, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = h.Write(&s.responses)
	s.responses.Write(b)
	s.responses.WriteByte('\n')
}

// result records one row of the results table (docs/security.md) and prints it as a SECURITY
// line.
func (s *securityRun) result(t *testing.T, check string, ok bool, detail string) {
	t.Helper()
	line := fmt.Sprintf("SECURITY check=%q pass=%v detail=%q", check, ok, detail)
	s.mu.Lock()
	s.results = append(s.results, line)
	s.mu.Unlock()
	fmt.Println(line)
	if !ok {
		t.Errorf("%s: %s", check, detail)
	}
}

func bearer(k string) map[string]string { return map[string]string{"Authorization": "Bearer " + k} }

// recordingProxy forwards to target and records the credential headers of every request.
type recordingProxy struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // "PATH Authorization=... Api-Key=..."
	tr   *http.Transport
}

func startRecordingProxy(t *testing.T, target string) *recordingProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &recordingProxy{tr: &http.Transport{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = p.tr
	rp.FlushInterval = -1
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen = append(p.seen, fmt.Sprintf("%s Authorization=%q Api-Key=%q", r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Api-Key")))
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { p.srv.Close(); p.tr.CloseIdleConnections() })
	return p
}

func (p *recordingProxy) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// nodeAuthReport is what test/e2e/npm/auth.mjs prints.
type nodeAuthReport struct {
	Kind  string       `json:"kind"`
	Wrong *nodeFailure `json:"wrong"`
	Plain *nodeText    `json:"plain"`
	Strm  *nodeText    `json:"stream"`
	// limit mode
	Statuses []int        `json:"statuses"`
	Limited  *nodeFailure `json:"limited"`
}

// String formats f for a results row.
func (f *nodeFailure) String() string {
	if f == nil {
		return "<none>"
	}
	deref := func(p *string) string {
		if p == nil {
			return "null"
		}
		return *p
	}
	st := "null"
	if f.Status != nil {
		st = strconv.Itoa(*f.Status)
	}
	return fmt.Sprintf("%s status=%s code=%s retry-after=%s retry-after-ms=%s (%s)", f.Class, st, deref(f.Code), deref(f.RetryAfter), deref(f.RetryAfterMS), f.Message)
}

type nodeFailure struct {
	Status       *int    `json:"status"`
	Class        string  `json:"class"`
	Code         *string `json:"code"`
	RetryAfter   *string `json:"retry_after"`
	RetryAfterMS *string `json:"retry_after_ms"`
	Message      string  `json:"message"`
}

type nodeText struct {
	Text         string `json:"text"`
	FinishReason string `json:"finish_reason"`
	Chunks       int    `json:"chunks"`
}

// runNodeAuth runs test/e2e/npm/auth.mjs (mode auth or limit) for an endpoint kind
// ("completions" or "chat") and returns its report.
func runNodeAuth(t *testing.T, s *securityRun, mode, base, model, prompt, key, arg, kind string) nodeAuthReport {
	t.Helper()
	stdout, stderr := runNode(t, "auth.mjs", mode, base+"/v1", model, prompt, key, arg, kind)
	s.record(http.Header{}, stdout)
	s.record(http.Header{}, stderr)
	var r nodeAuthReport
	if err := json.Unmarshal(stdout, &r); err != nil {
		t.Fatalf("auth.mjs output %q: %v", stdout, err)
	}
	return r
}

// TestSecurity is issue 14's proof with real processes on loopback: the admin API only on its
// own listener, client keys (the openai npm client included), per-key limits, upstream keys,
// https:// and mTLS gRPC workers, a wrong CA visible in /workers, key reloads on SIGHUP, and no
// secret anywhere in the logs, metrics or responses of the run.
func TestSecurity(t *testing.T) {
	run := &securityRun{}
	l := newLauncher(t)
	ca, otherCA := testutil.NewCA(t, "e2e-ca"), testutil.NewCA(t, "e2e-other-ca")
	serverPair, clientPair := ca.Server(t, "sim"), ca.Client(t, "gateway")

	keyed := startSim(t, l, harness.SimOptions{Name: "sim-keyed", Args: []string{"--api-key", secUpstreamKey}})
	proxy := startRecordingProxy(t, keyed.URL)
	httpsSim := startSim(t, l, harness.SimOptions{Name: "sim-https", TLS: &harness.SimTLS{CertFile: serverPair.CertFile, KeyFile: serverPair.KeyFile, CAFile: ca.CertFile}})
	grpcPort := testutil.FreePort(t)
	grpcSim := startSim(t, l, harness.SimOptions{Name: "sim-grpc-mtls", Args: []string{"--grpc-port", fmt.Sprint(grpcPort), "--runtime", "vllm"},
		TLS: &harness.SimTLS{CertFile: serverPair.CertFile, KeyFile: serverPair.KeyFile, ClientCAFile: ca.CertFile,
			CAFile: ca.CertFile, ClientCertFile: clientPair.CertFile, ClientKeyFile: clientPair.KeyFile}})
	grpcURL := fmt.Sprintf("grpc://127.0.0.1:%d", grpcPort)
	badCAURL := strings.Replace(httpsSim.URL, "127.0.0.1", "localhost", 1) // the same server under another URL

	keysFile := filepath.Join(t.TempDir(), "client-keys")
	mustf(t, os.WriteFile(keysFile, []byte("# e2e clients\nteam-a:"+secClientKeyA+"\nteam-b:"+secClientKeyB+"\n"), 0o600) == nil, "write keys")
	mtls := ",tls=true,tls_ca_file=" + ca.CertFile + ",tls_cert_file=" + clientPair.CertFile + ",tls_key_file=" + clientPair.KeyFile
	gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway-secure",
		Workers: []string{
			"url=" + httpsSim.URL + ",tls_ca_file=" + ca.CertFile + ",model=https",
			"url=" + proxy.srv.URL + ",api_key=" + secUpstreamKey + ",model=" + securityModelKS,
			"url=" + grpcURL + ",runtime=vllm,model=grpc" + mtls,
			"url=" + badCAURL + ",tls_ca_file=" + otherCA.CertFile + ",model=badca",
		},
		Env:  []string{"KVGATE_ADMIN_TOKEN=" + secAdminToken},
		Args: []string{"--api-key-file", keysFile, "--log-level", "debug", "--health-interval", "500ms"}})

	adminCalls := []struct{ method, path, body string }{
		{http.MethodGet, "/workers", ""}, {http.MethodPost, "/workers", `{"url":"http://127.0.0.1:9"}`},
		{http.MethodDelete, "/workers?url=" + httpsSim.URL, ""}, {http.MethodGet, "/debug/route?prompt=hi", ""},
	}
	t.Run("default configuration: admin API is not on the API listener", func(t *testing.T) {
		def := startGateway(t, l, harness.GatewayOptions{Name: "gateway-default", Workers: []string{"url=" + proxy.srv.URL + ",api_key=" + secUpstreamKey}})
		ok, detail := true, ""
		for _, c := range adminCalls {
			if st, _, b := run.call(t, c.method, def.URL+c.path, c.body, nil); st != http.StatusNotFound {
				ok, detail = false, fmt.Sprintf("%s %s: %d %s", c.method, c.path, st, b)
			}
		}
		var v workersView
		st, _, b := run.call(t, http.MethodGet, def.AdminURL+"/workers", "", nil)
		mustf(t, st == 200 && json.Unmarshal(b, &v) == nil, "admin /workers: %d %s", st, b)
		if len(v.Workers) != 1 {
			ok, detail = false, fmt.Sprintf("%d workers after the POST to the API listener, want 1", len(v.Workers))
		}
		run.result(t, "default configuration: admin paths on the API port answer 404, no worker added; admin on its loopback port", ok, detail)
	})

	t.Run("admin API is not on the API listener with client keys", func(t *testing.T) {
		ok, detail := true, ""
		for _, c := range adminCalls {
			// With a client key the path is unknown (404); the admin token is no client key (401).
			for hdr, want := range map[string]int{secClientKeyA: http.StatusNotFound, secAdminToken: http.StatusUnauthorized} {
				if st, _, b := run.call(t, c.method, gw.URL+c.path, c.body, bearer(hdr)); st != want {
					ok, detail = false, fmt.Sprintf("%s %s: %d %s, want %d", c.method, c.path, st, b, want)
				}
			}
		}
		var v workersView
		st, _, b := run.call(t, http.MethodGet, gw.AdminURL+"/workers", "", bearer(secAdminToken))
		mustf(t, st == 200 && json.Unmarshal(b, &v) == nil, "admin /workers: %d %s", st, b)
		if len(v.Workers) != 4 {
			ok, detail = false, fmt.Sprintf("%d workers after POSTs to the API listener, want 4", len(v.Workers))
		}
		run.result(t, "with --api-key: admin paths on the API port 404 with a client key, 401 with the admin token", ok, detail)
	})

	t.Run("admin listener needs the token", func(t *testing.T) {
		ok, detail := true, ""
		for _, hdr := range []map[string]string{nil, bearer("wrong"), bearer(secAdminToken + "x"), bearer(secClientKeyA)} {
			if st, _, b := run.call(t, http.MethodGet, gw.AdminURL+"/workers", "", hdr); st != http.StatusUnauthorized {
				ok, detail = false, fmt.Sprintf("with %v: %d %s", hdr, st, b)
			}
		}
		st, _, b := run.call(t, http.MethodPost, gw.AdminURL+"/workers", `{"url":"http://127.0.0.1:9","model":"scratch"}`, bearer(secAdminToken))
		st2, _, _ := run.call(t, http.MethodDelete, gw.AdminURL+"/workers?url=http://127.0.0.1:9", "", bearer(secAdminToken))
		st3, _, _ := run.call(t, http.MethodGet, gw.AdminURL+"/debug/route?prompt=hello", "", bearer(secAdminToken))
		if st != http.StatusCreated || st2 != http.StatusNoContent || st3 != http.StatusOK {
			ok, detail = false, fmt.Sprintf("with the token: add %d (%s), delete %d, debug %d", st, b, st2, st3)
		}
		run.result(t, "admin listener: 401 without the token, works with it", ok, detail)
	})

	t.Run("a non-loopback admin listener without a token is refused", func(t *testing.T) {
		ports := testutil.FreePorts(t, 2)
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		out, err := harness.CombinedOutput(ctx, harness.Command{Name: "gateway-refused", Path: bins.Gateway, Env: []string{"KVGATE_ADMIN_TOKEN="},
			Args: []string{"--host", "127.0.0.1", "--port", fmt.Sprint(ports[0]), "--prometheus-port", "-1", "--admin-host", "0.0.0.0", "--admin-port", fmt.Sprint(ports[1])}})
		run.record(http.Header{}, out)
		ok := err != nil && strings.Contains(string(out), "--admin-token") && strings.Contains(string(out), "not loopback-only")
		run.result(t, "--admin-host=0.0.0.0 without --admin-token: startup error", ok, strings.TrimSpace(string(out)))
	})

	prompt := text("security", 40)
	body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":4}`, testModel, prompt)
	t.Run("client keys", func(t *testing.T) {
		ok, detail := true, ""
		for _, c := range []struct {
			name string
			hdr  map[string]string
			want int
		}{
			{"no key", nil, 401}, {"wrong key", bearer(secWrongKey), 401}, {"basic auth", map[string]string{"Authorization": "Basic " + secClientKeyA}, 401},
			{"key a", bearer(secClientKeyA), 200}, {"key b as api-key header", map[string]string{"api-key": secClientKeyB}, 200},
		} {
			st, _, b := run.call(t, http.MethodPost, gw.URL+"/v1/completions", body, c.hdr)
			code, _, _, _ := errorBody(b)
			if st != c.want || (c.want == 401 && code != "invalid_api_key") {
				ok, detail = false, fmt.Sprintf("%s: %d %s", c.name, st, b)
			}
		}
		for _, p := range []string{"/health", "/readiness"} {
			if st, _, _ := run.call(t, http.MethodGet, gw.URL+p, "", nil); st != 200 {
				ok, detail = false, fmt.Sprintf("%s without a key: %d", p, st)
			}
		}
		run.result(t, "completions: no/wrong key 401 invalid_api_key, right key 200; probes open", ok, detail)

		r := runNodeAuth(t, run, "auth", gw.URL, testModel, prompt, secClientKeyA, secWrongKey, "completions")
		nok := r.Wrong != nil && r.Wrong.Status != nil && *r.Wrong.Status == 401 && r.Wrong.Class == "AuthenticationError" &&
			r.Wrong.Code != nil && *r.Wrong.Code == "invalid_api_key" &&
			r.Plain != nil && r.Plain.Text != "" && r.Strm != nil && r.Strm.Chunks >= 4 && r.Strm.FinishReason == "length"
		run.result(t, "openai npm client: wrong apiKey AuthenticationError, right apiKey plain and streaming completions", nok, fmt.Sprintf("wrong key: %s; plain: %+v; stream: %+v", r.Wrong, *r.Plain, *r.Strm))

		// The same through chat.completions: /v1/chat/completions is behind the same keys.
		st, _, b := run.call(t, http.MethodPost, gw.URL+"/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":4}`, testModel, prompt), nil)
		code, _, _, _ := errorBody(b)
		run.result(t, "chat completions: no key 401 invalid_api_key", st == 401 && code == "invalid_api_key", fmt.Sprintf("%d %s", st, b))
		r = runNodeAuth(t, run, "auth", gw.URL, testModel, prompt, secClientKeyA, secWrongKey, "chat")
		cok := r.Wrong != nil && r.Wrong.Status != nil && *r.Wrong.Status == 401 && r.Wrong.Class == "AuthenticationError" &&
			r.Plain != nil && r.Plain.FinishReason != "" && r.Strm != nil && r.Strm.Chunks >= 2 && r.Strm.FinishReason != ""
		run.result(t, "openai npm client: wrong apiKey AuthenticationError, right apiKey plain and streaming chat completions", cok, fmt.Sprintf("wrong key: %s; plain: %+v; stream: %+v", r.Wrong, r.Plain, r.Strm))
	})

	t.Run("upstream key", func(t *testing.T) {
		st, _, b := run.call(t, http.MethodPost, keyed.URL+"/v1/completions", body, nil)
		direct := st == http.StatusUnauthorized && strings.Contains(string(b), "Unauthorized")
		kb := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":4}`, securityModelKS, prompt)
		st, h, b := run.call(t, http.MethodPost, gw.URL+"/v1/completions", kb, bearer(secClientKeyA))
		served := st == 200 && h.Get("X-Kvgate-Worker") == proxy.srv.URL
		_, events := streamCompletionAuth(t, run, gw.URL, kb, secClientKeyB)
		streamed := len(events) > 2 && events[len(events)-1] == "[DONE]"
		reqs := proxy.requests()
		clean, paths := len(reqs) > 0, map[string]bool{}
		for _, r := range reqs {
			paths[strings.Fields(r)[0]] = true
			if !strings.Contains(r, `Authorization="Bearer `+secUpstreamKey+`"`) || strings.Contains(r, "sk-client") || !strings.Contains(r, `Api-Key=""`) {
				clean = false
			}
		}
		ok := direct && served && streamed && clean && paths["/health"] && paths["/v1/models"] && paths["/v1/completions"]
		run.result(t, "worker with --api-key: 401 direct; served through the gateway (plain and streaming); every call carried the worker's key, never the client's",
			ok, fmt.Sprintf("direct=%v served=%v (%d %s) streamed=%v clean=%v paths=%v requests=%d", direct, served, st, b, streamed, clean, paths, len(reqs)))
	})

	t.Run("TLS workers", func(t *testing.T) {
		// Every simulator reports testModel, so the default model goes to any healthy worker;
		// each worker's own model name (the spec's model=) reaches that worker only.
		hb := fmt.Sprintf(`{"model":"https","prompt":%q,"max_tokens":4}`, prompt)
		st, h, b := run.call(t, http.MethodPost, gw.URL+"/v1/completions", hb, bearer(secClientKeyA))
		https := st == 200 && h.Get("X-Kvgate-Worker") == httpsSim.URL
		gb := fmt.Sprintf(`{"model":"grpc","prompt":%q,"max_tokens":4}`, prompt)
		st2, h2, b2 := run.call(t, http.MethodPost, gw.URL+"/v1/completions", gb, bearer(secClientKeyA))
		grpcOK := st2 == 200 && h2.Get("X-Kvgate-Worker") == grpcURL
		_, events := streamCompletionAuth(t, run, gw.URL, gb, secClientKeyA)
		grpcStream := len(events) > 2 && events[len(events)-1] == "[DONE]"
		run.result(t, "https:// worker with a test CA serves", https, fmt.Sprintf("%d from %q (want %q) %s", st, h.Get("X-Kvgate-Worker"), httpsSim.URL, b))
		run.result(t, "grpc:// worker over mTLS serves (plain and streaming)", grpcOK && grpcStream, fmt.Sprintf("%d %s stream=%v", st2, b2, grpcStream))

		var v struct {
			Workers []struct {
				URL           string `json:"url"`
				Healthy       bool   `json:"healthy"`
				HealthMessage string `json:"health_message"`
				APIKey        string `json:"api_key"`
			} `json:"workers"`
		}
		var bad string
		ok := harness.Eventually(defaultTestTimeout, func() bool {
			_, _, wb := run.call(t, http.MethodGet, gw.AdminURL+"/workers", "", bearer(secAdminToken))
			if json.Unmarshal(wb, &v) != nil {
				return false
			}
			for _, w := range v.Workers {
				if w.URL == badCAURL {
					bad = w.HealthMessage
					return !w.Healthy && strings.Contains(w.HealthMessage, "x509") && strings.Contains(w.HealthMessage, "tls_ca_file")
				}
			}
			return false
		})
		run.result(t, "wrong CA: worker unhealthy, /workers health_message says why", ok, bad)
		redacted := false
		for _, w := range v.Workers {
			if w.URL == proxy.srv.URL {
				redacted = w.APIKey == "REDACTED"
			}
		}
		run.result(t, "/workers shows api_key as REDACTED", redacted, "")
	})

	limitsFile := filepath.Join(t.TempDir(), "limit-keys")
	mustf(t, os.WriteFile(limitsFile, []byte("limits:"+secLimitKey+"\n"), 0o600) == nil, "write keys")
	gwl := startGateway(t, l, harness.GatewayOptions{Name: "gateway-limits",
		Workers: []string{"url=" + proxy.srv.URL + ",api_key=" + secUpstreamKey},
		Args:    []string{"--api-key-file", limitsFile, "--rate-limit", "0.2", "--rate-burst", "2", "--max-concurrent-per-key", "1"}})

	t.Run("per-key limits", func(t *testing.T) {
		// A long stream holds the key's one slot.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		long := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":400,"stream":true}`, testModel, prompt)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gwl.URL+"/v1/completions", strings.NewReader(long))
		req.Header.Set("Authorization", "Bearer "+secLimitKey)
		resp, err := http.DefaultClient.Do(req)
		mustf(t, err == nil && resp.StatusCode == 200, "long stream: %v", err)
		first, _ := bufio.NewReader(resp.Body).ReadString('\n')
		st, h, b := run.call(t, http.MethodPost, gwl.URL+"/v1/completions", body, bearer(secLimitKey))
		code, _, _, _ := errorBody(b)
		run.result(t, "--max-concurrent-per-key 1: a second request while a stream runs gets 429 with Retry-After", st == 429 && h.Get("Retry-After") == "1" && code == "rate_limit_exceeded",
			fmt.Sprintf("%d Retry-After=%q %s (stream began %q)", st, h.Get("Retry-After"), b, strings.TrimSpace(first)))
		cancel()
		resp.Body.Close()
		// The slot is free once the stream's handler has returned, which its request count shows.
		mustf(t, harness.Eventually(defaultTestTimeout, func() bool {
			return scrape(t, gwl.MetricsURL())["kvgate_requests_total"].sum(map[string]string{"route": "/v1/completions"}) >= 1
		}), "the cancelled stream never ended")
		// One of the burst of 2 went to the stream: of 3 quick requests the first passes, the
		// others are over the rate (one token per 5 s).
		r := runNodeAuth(t, run, "limit", gwl.URL, testModel, prompt, secLimitKey, "3", "completions")
		lim := r.Limited
		ok := len(r.Statuses) == 3 && r.Statuses[0] == 200 && r.Statuses[2] == 429 && lim != nil && lim.Class == "RateLimitError" &&
			lim.RetryAfter != nil && atoi(*lim.RetryAfter) >= 1 && atoi(*lim.RetryAfter) <= 5 && lim.RetryAfterMS != nil
		run.result(t, "--rate-limit 0.2 --rate-burst 2: past the burst the openai client gets RateLimitError with Retry-After", ok, fmt.Sprintf("statuses %v; first 429: %s", r.Statuses, lim))
		fams := scrape(t, gwl.MetricsURL())
		rate := fams["kvgate_client_limited_total"].sum(map[string]string{"key": "limits", "limit": "rate"})
		conc := fams["kvgate_client_limited_total"].sum(map[string]string{"key": "limits", "limit": "concurrency"})
		run.result(t, "429s counted by key name in kvgate_client_limited_total", rate >= 1 && conc == 1, fmt.Sprintf("rate %v concurrency %v", rate, conc))
	})

	t.Run("SIGHUP reloads the key file", func(t *testing.T) {
		mustf(t, os.WriteFile(limitsFile, []byte("limits2:"+secLimitKey2+"\n"), 0o600) == nil, "rewrite keys")
		mustf(t, gwl.Signal(syscall.SIGHUP) == nil, "SIGHUP")
		ok := harness.Eventually(defaultTestTimeout, func() bool {
			st, _, _ := run.call(t, http.MethodGet, gwl.URL+"/v1/models", "", bearer(secLimitKey2))
			return st == 200
		})
		st, _, _ := run.call(t, http.MethodGet, gwl.URL+"/v1/models", "", bearer(secLimitKey))
		exited, _ := gwl.Exited()
		run.result(t, "SIGHUP: the new key works, the removed key gets 401, the gateway keeps running", ok && st == 401 && !exited, fmt.Sprintf("old key %d", st))
	})

	t.Run("no secret in logs, metrics or responses", func(t *testing.T) {
		var corpus bytes.Buffer
		for _, u := range []string{gw.MetricsURL(), gwl.MetricsURL()} {
			st, _, b := run.call(t, http.MethodGet, u, "", nil)
			mustf(t, st == 200, "metrics %s: %d", u, st)
			corpus.Write(b)
		}
		// The keyed simulator and the gateways log as they run; their log files begin with the
		// harness's record of the command line ("# path args"), which is not their output.
		for _, p := range []*harness.Process{gw.Process, gwl.Process, keyed.Process, httpsSim.Process, grpcSim.Process} {
			b, err := os.ReadFile(p.LogPath)
			mustf(t, err == nil, "read %s: %v", p.LogPath, err)
			if i := bytes.IndexByte(b, '\n'); bytes.HasPrefix(b, []byte("# ")) && i >= 0 {
				b = b[i+1:]
			}
			corpus.Write(b)
		}
		run.mu.Lock()
		corpus.Write(run.responses.Bytes())
		run.mu.Unlock()
		var found []string
		for _, s := range []string{secClientKeyA, secClientKeyB, secWrongKey, secLimitKey, secLimitKey2, secAdminToken, secUpstreamKey} {
			if bytes.Contains(corpus.Bytes(), []byte(s)) {
				found = append(found, s)
			}
		}
		names := strings.Contains(corpus.String(), `key="team-a"`) && strings.Contains(corpus.String(), `key="limits"`)
		run.result(t, "grep of gateway and simulator logs, both gateways' metrics and every response: no key or token", len(found) == 0 && names,
			fmt.Sprintf("%d bytes searched; found %v; key names in metrics %v", corpus.Len(), found, names))
	})
}

// streamCompletionAuth posts a streaming request with a client key and returns its data
// payloads.
func streamCompletionAuth(t *testing.T, s *securityRun, base, body, key string) (int, []string) {
	t.Helper()
	var m map[string]any
	mustf(t, json.Unmarshal([]byte(body), &m) == nil, "body")
	m["stream"] = true
	b, _ := json.Marshal(m)
	st, _, rb := s.call(t, http.MethodPost, base+"/v1/completions", string(b), bearer(key))
	var out []string
	for _, line := range strings.Split(string(rb), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, d)
		}
	}
	return st, out
}

// errorBody returns the code, type, param and message of an OpenAI error body.
func errorBody(b []byte) (code, typ, param, msg string) {
	var e struct {
		Error struct {
			Code    any    `json:"code"`
			Type    string `json:"type"`
			Param   any    `json:"param"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return fmt.Sprint(e.Error.Code), e.Error.Type, fmt.Sprint(e.Error.Param), e.Error.Message
}

// atoi is strconv.Atoi with -1 for anything that is not a number.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
