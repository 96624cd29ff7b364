//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/deploy"
	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/testutil"
)

// responsesTurn is one turn of responses.mjs's turns mode.
type responsesTurn struct {
	ID             string   `json:"id"`
	Status         string   `json:"status"`
	Worker         string   `json:"worker"`
	Reason         string   `json:"reason"`
	MatchedBlocks  int      `json:"matched_blocks"`
	InputTokens    int      `json:"input_tokens"`
	CachedTokens   int      `json:"cached_tokens"`
	ReasoningToken int      `json:"reasoning_tokens"`
	Text           string   `json:"text"`
	Types          []string `json:"types"`
}

type responsesOutput struct {
	Type, ID, Name, Arguments string
	Status                    *string
	Text                      string
	Reasoning                 string
	CallID                    string `json:"call_id"`
}

type responseSummary struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Status             string            `json:"status"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Output             []responsesOutput `json:"output"`
	OutputText         string            `json:"output_text"`
	Worker             string            `json:"worker"`
	Deltas             string            `json:"deltas"`
	Events             []struct {
		Type string `json:"type"`
		Seq  int    `json:"seq"`
	} `json:"events"`
	Usage *struct {
		InputTokens         int `json:"input_tokens"`
		OutputTokensDetails struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
	} `json:"usage"`
}

// runScript runs an npm script against base and decodes its report into v.
func runScript(t *testing.T, script, base string, v any, args ...string) {
	t.Helper()
	stdout, _ := runNode(t, script, append([]string{base + "/v1", testModel}, args...)...)
	t.Logf("%s %v: %s", script, args, stdout)
	if err := json.Unmarshal(stdout, v); err != nil {
		t.Fatalf("%s output %q: %v", script, stdout, err)
	}
}

// toolFinal is the tool fleet's second reply: the answer once the tool has run.
const toolFinal = "It is sunny in Paris, 21 degrees: perfect for a picnic."

// TestResponsesWorkers is issue 22 end to end with the official clients, over grpc:// workers
// (the gateway renders each turn's chat request and builds the output from the generated ids
// with Qwen3's parsers) and over http:// workers (the simulators render and parse chat
// themselves, as vLLM with --reasoning-parser qwen3 --tool-call-parser hermes): the openai
// client's create, stream, follow-ups by previous_response_id, retrieve, input items and delete;
// conversations by previous_response_id that stay on the worker caching them (cached_tokens);
// the Agents SDK running an agent with a function tool to completion; the AI SDK's
// generateText and streamText; bad input; and /debug/route explaining a follow-up's chain.
func TestResponsesWorkers(t *testing.T) {
	for _, kind := range []string{"grpc", "http"} {
		t.Run(kind, func(t *testing.T) {
			l := newLauncher(t)
			ports := testutil.FreePorts(t, 4)
			worker := func(i int, replies string) string {
				name := fmt.Sprintf("%s-resp-%d", kind, i)
				if kind == "grpc" {
					startSim(t, l, harness.SimOptions{Name: name, Args: []string{"--grpc-port", fmt.Sprint(ports[i]), "--runtime", "vllm", "--reply-file", replies}})
					return fmt.Sprintf("url=grpc://127.0.0.1:%d,runtime=vllm", ports[i])
				}
				s := startSim(t, l, harness.SimOptions{Name: name, Events: true,
					Args: []string{"--reply-file", replies, "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes"}})
				return s.WorkerSpec(true)
			}
			plain := replyFile(t, plainReplies()...)
			var specs []string
			for i := range 3 {
				specs = append(specs, worker(i, plain))
			}
			gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: specs})
			t.Run("turns", func(t *testing.T) {
				var r struct{ Sessions [][]responsesTurn }
				runScript(t, "responses.mjs", gw.URL, &r, "turns", "3", "4")
				checkResponsesTurns(t, r.Sessions, 3, 4)
			})
			t.Run("bad input", func(t *testing.T) { checkResponsesBadInput(t, gw) })
			t.Run("debug route", func(t *testing.T) { checkResponsesDebug(t, gw) })
			tgw := startGateway(t, l, harness.GatewayOptions{Name: "gateway-tools", Workers: []string{worker(3, replyFile(t, toolReply, toolFinal))}})
			t.Run("openai tools", func(t *testing.T) { checkResponsesTools(t, tgw) })
			t.Run("agents sdk", func(t *testing.T) { checkAgents(t, tgw) })
			t.Run("ai sdk", func(t *testing.T) { checkAISDK(t, tgw) })
		})
	}
}

// checkResponsesTurns: every later turn of a session lands on its first turn's worker by
// cache_hit, and the engine's cache covers the previous turn's prompt.
func checkResponsesTurns(t *testing.T, sessions [][]responsesTurn, n, turns int) {
	t.Helper()
	if len(sessions) != n {
		t.Fatalf("sessions: got %d, want %d", len(sessions), n)
	}
	workers := map[string]bool{}
	for s, ts := range sessions {
		if len(ts) != turns {
			t.Fatalf("session %d: %d turns, want %d", s, len(ts), turns)
		}
		workers[ts[0].Worker] = true
		for i, tr := range ts {
			if tr.Status != "completed" || !isPlainAnswer(tr.Text) || !strings.HasPrefix(tr.ID, "resp_") || tr.ReasoningToken <= 0 {
				t.Errorf("session %d turn %d: %+v, want completed with a scripted answer and its reasoning counted", s, i, tr)
			}
			if i == 0 {
				continue
			}
			if tr.Worker != ts[0].Worker || tr.Reason != "cache_hit" {
				t.Errorf("session %d turn %d went to %s (%s), want %s (cache_hit): the worker holding its history", s, i, tr.Worker, tr.Reason, ts[0].Worker)
			}
			prev := ts[i-1].InputTokens
			if tr.CachedTokens <= 0 || tr.CachedTokens < prev-16 || tr.MatchedBlocks < prev/16-1 {
				t.Errorf("session %d turn %d: %d cached tokens, %d matched blocks; want about the previous prompt's %d tokens", s, i, tr.CachedTokens, tr.MatchedBlocks, prev)
			}
		}
	}
	t.Logf("%d sessions of %d turns on %d workers", n, turns, len(workers))
}

// checkResponsesTools: the function call, the follow-up answering it (streamed, with every
// event in order), retrieve, input items, delete.
func checkResponsesTools(t *testing.T, gw *harness.Gateway) {
	var r struct {
		First, Second, Retrieved responseSummary
		InputItems               []struct {
			Type, ID string
			CallID   string `json:"call_id"`
		} `json:"input_items"`
		FirstInputItems []struct{ Type, Role string } `json:"first_input_items"`
		AfterDelete     any                           `json:"after_delete"`
	}
	runScript(t, "responses.mjs", gw.URL, &r, "tools")
	f := r.First
	var call *responsesOutput
	for i := range f.Output {
		if f.Output[i].Type == "function_call" {
			call = &f.Output[i]
		}
	}
	if f.Object != "response" || f.Status != "completed" || len(f.Output) < 2 || f.Output[0].Type != "reasoning" ||
		!strings.Contains(f.Output[0].Reasoning, "current weather in Paris") || call == nil {
		t.Fatalf("first: %+v, want reasoning then a get_weather call", f)
	}
	var args map[string]any
	if call.Name != "get_weather" || !strings.HasPrefix(call.CallID, "chatcmpl-tool-") || json.Unmarshal([]byte(call.Arguments), &args) != nil || args["city"] != "Paris" {
		t.Errorf("call %+v", call)
	}
	if f.Usage == nil || f.Usage.OutputTokensDetails.ReasoningTokens <= 0 {
		t.Errorf("first usage %+v: want reasoning tokens", f.Usage)
	}
	s := r.Second
	if s.Status != "completed" || s.PreviousResponseID == nil || *s.PreviousResponseID != f.ID || s.OutputText != toolFinal || s.Deltas != toolFinal {
		t.Errorf("second: %+v, want the answer continuing %s", s, f.ID)
	}
	if n := len(s.Events); n < 8 || s.Events[0].Type != "response.created" || s.Events[1].Type != "response.in_progress" || s.Events[n-1].Type != "response.completed" {
		t.Errorf("events %+v", s.Events)
	}
	for i, e := range s.Events {
		if e.Seq != i {
			t.Errorf("event %d (%s) has sequence_number %d", i, e.Type, e.Seq)
		}
	}
	if r.Retrieved.ID != s.ID || r.Retrieved.OutputText != toolFinal {
		t.Errorf("retrieved %+v", r.Retrieved)
	}
	if len(r.InputItems) != 1 || r.InputItems[0].Type != "function_call_output" || r.InputItems[0].CallID != call.CallID {
		t.Errorf("input items of the follow-up: %+v, want its function_call_output", r.InputItems)
	}
	if len(r.FirstInputItems) != 1 || r.FirstInputItems[0].Type != "message" || r.FirstInputItems[0].Role != "user" {
		t.Errorf("input items of the first: %+v, want the user message", r.FirstInputItems)
	}
	if r.AfterDelete != 404.0 {
		t.Errorf("retrieve after delete: %v, want 404", r.AfterDelete)
	}
}

// checkAgents: the Agents SDK runs its agent to completion twice, the second run continuing the
// first by previousResponseId; the tool ran each time.
func checkAgents(t *testing.T, gw *harness.Gateway) {
	var r struct {
		Calls         []string
		First, Second struct {
			Final          string
			LastResponseID string `json:"last_response_id"`
			Items          []string
			Responses      int
		}
	}
	runScript(t, "agents.mjs", gw.URL, &r)
	if len(r.Calls) != 2 || r.Calls[0] != "Paris" {
		t.Errorf("tool calls %v, want Paris twice", r.Calls)
	}
	for name, run := range map[string]struct {
		Final          string
		LastResponseID string `json:"last_response_id"`
		Items          []string
		Responses      int
	}{"first": r.First, "second": r.Second} {
		if run.Final != toolFinal || run.Responses != 2 || !strings.HasPrefix(run.LastResponseID, "resp_") || !contains(run.Items, "tool_call_output_item") {
			t.Errorf("%s run: %+v, want the answer after a tool call", name, run)
		}
	}
}

// checkAISDK: generateText and streamText each call the tool, then answer in a second step.
func checkAISDK(t *testing.T, gw *harness.Gateway) {
	type run struct {
		Text      string
		Steps     int
		Finish    string
		ToolCalls []string `json:"tool_calls"`
	}
	var r struct {
		Calls            []string
		Generate, Stream run
	}
	runScript(t, "aisdk.mjs", gw.URL, &r)
	for name, g := range map[string]run{"generateText": r.Generate, "streamText": r.Stream} {
		if strings.TrimSpace(g.Text) != toolFinal || g.Steps != 2 || g.Finish != "stop" || len(g.ToolCalls) != 1 || g.ToolCalls[0] != "get_weather" {
			t.Errorf("%s: %+v, want a get_weather step then the answer", name, g)
		}
	}
	if len(r.Calls) != 2 {
		t.Errorf("tool calls %v, want 2", r.Calls)
	}
}

// postJSON posts body to u and returns the status and body.
func postJSON(t *testing.T, method, u, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// checkResponsesBadInput: what the gateway does not serve and malformed input are OpenAI-shaped
// errors naming the field, nothing is stored, and the gateway keeps serving.
func checkResponsesBadInput(t *testing.T, gw *harness.Gateway) {
	for _, tt := range []struct {
		name, body string
		status     int
		param      string
	}{
		{"web search", `{"model":"qwen3-sim","input":"x","tools":[{"type":"web_search"}]}`, 400, "tools[0].type"},
		{"background", `{"model":"qwen3-sim","input":"x","background":true}`, 400, "background"},
		{"unknown item", `{"model":"qwen3-sim","input":[{"type":"telepathy"}]}`, 400, "input[0].type"},
		{"malformed item", `{"model":"qwen3-sim","input":[{"type":"function_call","name":"f"}]}`, 400, "input[0].call_id"},
		{"unknown previous", `{"model":"qwen3-sim","input":"x","previous_response_id":"resp_00000000000000000000000000000000"}`, 404, "previous_response_id"},
		{"unknown conversation", `{"model":"qwen3-sim","input":"x","conversation":"conv_nope"}`, 404, "conversation"},
		{"too large", `{"model":"qwen3-sim","input":"` + strings.Repeat("x", 9<<20) + `"}`, 413, "<nil>"},
	} {
		st, b := postJSON(t, http.MethodPost, gw.URL+"/v1/responses", tt.body)
		code, typ, param, msg := errorBody([]byte(b))
		if st != tt.status || param != tt.param || typ == "" || msg == "" || code == "" {
			t.Errorf("%s: got %d %s, want %d naming %q", tt.name, st, b, tt.status, tt.param)
		}
	}
	if st, b := postJSON(t, http.MethodGet, gw.URL+"/v1/responses/resp_nope", ""); st != 404 || !strings.Contains(b, `"not_found"`) {
		t.Errorf("retrieve unknown: %d %s", st, b)
	}
	if st, b := postJSON(t, http.MethodPost, gw.URL+"/v1/responses", `{"model":"qwen3-sim","input":"Which city is the capital of France?","max_output_tokens":32}`); st != 200 || !strings.Contains(b, `"status":"completed"`) {
		t.Errorf("a good request after the bad ones: %d %s", st, b)
	}
}

// checkResponsesDebug: /debug/route explains a follow-up: the chain it expanded and the ids it
// routes on, with the worker that holds them.
func checkResponsesDebug(t *testing.T, gw *harness.Gateway) {
	st, b := postJSON(t, http.MethodPost, gw.URL+"/v1/responses", `{"model":"qwen3-sim","instructions":"Be brief.","input":"Where is Lyon? Answer in one sentence, please.","max_output_tokens":32}`)
	if st != 200 {
		t.Fatalf("first turn: %d %s", st, b)
	}
	var first struct{ ID string }
	_ = json.Unmarshal([]byte(b), &first)
	var ex struct {
		PromptTokens int `json:"prompt_tokens"`
		Decision     *struct {
			Worker        string `json:"worker"`
			Reason        string `json:"reason"`
			MatchedBlocks int    `json:"matched_blocks"`
		} `json:"decision"`
		Responses struct {
			Chain        []string `json:"chain"`
			HistoryItems int      `json:"history_items"`
		} `json:"responses"`
	}
	body := fmt.Sprintf(`{"model":"qwen3-sim","instructions":"Be brief.","input":"And Marseille?","previous_response_id":%q}`, first.ID)
	harness.Eventually(10*time.Second, func() bool {
		st, b = postJSON(t, http.MethodPost, gw.AdminURL+"/debug/route", body)
		return st == 200 && json.Unmarshal([]byte(b), &ex) == nil && ex.Decision != nil && ex.Decision.MatchedBlocks > 0
	})
	// The history is the first turn's input and output (reasoning, message); the prompt up to
	// the first turn's generation prompt is cached on the worker that served it.
	if st != 200 || len(ex.Responses.Chain) != 1 || ex.Responses.Chain[0] != first.ID || ex.Responses.HistoryItems != 3 || ex.Decision == nil ||
		ex.Decision.MatchedBlocks < 1 || ex.Decision.Reason != "cache_hit" {
		t.Errorf("debug route of a follow-up: %d %s, want the chain [%s] with its history matched", st, b, first.ID)
	}
}

// TestResponsesReplicas: two gateway replicas behind a real nginx share a Redis store, so a
// conversation by previous_response_id whose turns alternate between the replicas finds its
// chain on either, and each follow-up lands on the worker that served its chain (both replicas
// hold the same event index), with its history cached. With Redis down, turns that need the
// store are 503s, store: false turns are served; when Redis returns, so does the service.
func TestResponsesReplicas(t *testing.T) {
	l := newLauncher(t)
	plain := replyFile(t, plainReplies()...)
	var specs []string
	for i := range 3 {
		s := startSim(t, l, harness.SimOptions{Name: fmt.Sprintf("sim%d", i), Events: true, Args: []string{"--reply-file", plain, "--reasoning-parser", "qwen3"}})
		specs = append(specs, s.WorkerSpec(true))
	}
	rs := testutil.StartRedis(t, 0)
	store := []string{"--responses-store", rs.URL, "--responses-store-timeout", "300ms"}
	gws := []*harness.Gateway{
		startGateway(t, l, harness.GatewayOptions{Name: "gateway0", Workers: specs, Args: store}),
		startGateway(t, l, harness.GatewayOptions{Name: "gateway1", Workers: specs, Args: store}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	nginx, err := l.StartNginx(ctx, harness.NginxOptions{
		Upstreams: []string{fmt.Sprintf("127.0.0.1:%d", gws[0].Port), fmt.Sprintf("127.0.0.1:%d", gws[1].Port)},
		Config: func(listen string, upstreams []string, prefix string) (string, error) {
			return deploy.NginxConfig(deploy.NginxParams{Listen: listen, Upstreams: upstreams, Standalone: true, Prefix: prefix, WorkerProcesses: 1})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, nginx.Process)
	served := func() [2]float64 {
		var out [2]float64
		for i, g := range gws {
			if f := scrape(t, g.MetricsURL())["kvgate_requests_total"]; f != nil {
				out[i] = f.sum(map[string]string{"route": "/v1/responses", "code": "200"})
			}
		}
		return out
	}
	var r struct{ Sessions [][]responsesTurn }
	runScript(t, "responses.mjs", nginx.URL, &r, "turns", "2", "4")
	checkResponsesTurns(t, r.Sessions, 2, 4)
	if n := served(); n[0] < 2 || n[1] < 2 {
		t.Errorf("turns served per replica: %v, want both replicas to serve follow-ups of chains the other began", n)
	}
	// A chain begun on one replica continues on the other, directly.
	st, b := postJSON(t, http.MethodPost, gws[0].URL+"/v1/responses", `{"model":"qwen3-sim","input":"Which city is the capital of France?","max_output_tokens":32}`)
	var first struct{ ID string }
	if st != 200 || json.Unmarshal([]byte(b), &first) != nil {
		t.Fatalf("turn on replica 0: %d %s", st, b)
	}
	follow := fmt.Sprintf(`{"model":"qwen3-sim","input":"And its river?","previous_response_id":%q,"max_output_tokens":32}`, first.ID)
	if st, b := postJSON(t, http.MethodPost, gws[1].URL+"/v1/responses", follow); st != 200 || !strings.Contains(b, first.ID) {
		t.Errorf("follow-up on replica 1 of a replica 0 turn: %d %s", st, b)
	}
	if st, b := postJSON(t, http.MethodGet, gws[1].URL+"/v1/responses/"+first.ID, ""); st != 200 || !strings.Contains(b, `"status":"completed"`) {
		t.Errorf("retrieve on replica 1: %d %s", st, b)
	}
	checkRedisOutage(t, rs, gws[1], follow)
}

// checkRedisOutage stops Redis: a follow-up is a clear 503, a store: false turn is served; once
// Redis is back (empty: nothing persisted), new chains work again.
func checkRedisOutage(t *testing.T, rs *testutil.Redis, gw *harness.Gateway, follow string) {
	if err := rs.Stop(harness.DefaultStopTimeout); err != nil {
		t.Fatal(err)
	}
	st, b := postJSON(t, http.MethodPost, gw.URL+"/v1/responses", follow)
	if code, _, _, msg := errorBody([]byte(b)); st != 503 || code != "store_unavailable" || !strings.Contains(msg, "store: false") {
		t.Errorf("follow-up with Redis down: %d %s, want 503 store_unavailable", st, b)
	}
	if st, b := postJSON(t, http.MethodPost, gw.URL+"/v1/responses", `{"model":"qwen3-sim","input":"Hello?","store":false,"max_output_tokens":16}`); st != 200 {
		t.Errorf("store: false with Redis down: %d %s", st, b)
	}
	testutil.StartRedis(t, rs.Port)
	ok := harness.Eventually(10*time.Second, func() bool {
		st, _ := postJSON(t, http.MethodPost, gw.URL+"/v1/responses", `{"model":"qwen3-sim","input":"Back?","max_output_tokens":16}`)
		return st == 200
	})
	if !ok {
		t.Error("the gateway did not recover once Redis was back")
	}
}
