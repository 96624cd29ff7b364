//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/testutil"
)

// chatMessage is a message as test/e2e/npm/chat.mjs reports it.
type chatMessage struct {
	Role             string  `json:"role"`
	Content          *string `json:"content"`
	ReasoningContent *string `json:"reasoning_content"`
	Reasoning        *string `json:"reasoning"`
	ToolCalls        []struct {
		ID, Type, Name, Arguments string
	} `json:"tool_calls"`
}

// chatStream is a collected stream as chat.mjs reports it.
type chatStream struct {
	Chunks           int    `json:"chunks"`
	FirstRole        string `json:"first_role"`
	Content          string `json:"content"`
	ReasoningContent string `json:"reasoning_content"`
	Reasoning        string `json:"reasoning"`
	ToolCalls        []struct {
		ID, Type, Name, Arguments string
	} `json:"tool_calls"`
	FinishReason string `json:"finish_reason"`
	Usage        *usage `json:"usage"`
}

type chatReport struct {
	Nonstream struct {
		ID           string      `json:"id"`
		Object       string      `json:"object"`
		Model        string      `json:"model"`
		Message      chatMessage `json:"message"`
		FinishReason string      `json:"finish_reason"`
		Usage        *usage      `json:"usage"`
		Worker       string      `json:"worker"`
	} `json:"nonstream"`
	Stream   chatStream `json:"stream"`
	Sessions [][]struct {
		Worker        string `json:"worker"`
		Reason        string `json:"reason"`
		MatchedBlocks int    `json:"matched_blocks"`
		PromptTokens  int    `json:"prompt_tokens"`
		CachedTokens  int    `json:"cached_tokens"`
		Answer        string `json:"answer"`
	} `json:"sessions"`
}

// runNode runs the node script test/e2e/npm/SCRIPT (driving the official openai npm client)
// with args and returns its stdout and stderr; a failed run fails the test.
func runNode(t *testing.T, script string, args ...string) (stdout, stderr []byte) {
	t.Helper()
	if npmErr != nil {
		t.Fatalf("the openai npm client is not installed: %v", npmErr)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := filepath.Join(repoRoot, "test", "e2e", "npm")
	var out, errb bytes.Buffer
	cmd := harness.Command{Name: "node-" + strings.TrimSuffix(script, ".mjs"), Path: node, Dir: dir, Args: append([]string{filepath.Join(dir, script)}, args...)}
	if err := harness.Run(ctx, cmd, &out, &errb); err != nil {
		t.Fatalf("node %s %q: %v\nstdout: %s\nstderr: %s", script, args, err, out.Bytes(), errb.Bytes())
	}
	return out.Bytes(), errb.Bytes()
}

// runChatClient runs test/e2e/npm/chat.mjs against base in mode (plain, tools, turns).
func runChatClient(t *testing.T, base, mode string, args ...string) chatReport {
	t.Helper()
	stdout, _ := runNode(t, "chat.mjs", append([]string{base + "/v1", testModel, mode}, args...)...)
	t.Logf("chat.mjs %s: %s", mode, stdout)
	var r chatReport
	if err := json.Unmarshal(stdout, &r); err != nil {
		t.Fatalf("chat.mjs output %q: %v", stdout, err)
	}
	return r
}

// replyFile writes a simworker --reply-file with the given replies.
func replyFile(t *testing.T, replies ...string) string {
	t.Helper()
	var b strings.Builder
	for _, r := range replies {
		j, _ := json.Marshal(r)
		b.Write(j)
		b.WriteByte('\n')
	}
	p := filepath.Join(t.TempDir(), "replies.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// plainAnswers are the scripted answers of the plain-chat simulators; each reply thinks first
// (plainThought), as Qwen3 does with thinking on (the template's default).
var plainAnswers = []string{
	"Paris is the capital of France, on the Seine.",
	"The fastest trains take about two hours.",
	"Yes: Marseille is about three more hours by TGV.",
}

const plainThought = "A short factual question."

func plainReplies() []string {
	out := make([]string, len(plainAnswers))
	for i, a := range plainAnswers {
		out[i] = "<think>\n" + plainThought + "\n</think>\n\n" + a
	}
	return out
}

// isPlainAnswer reports whether content is a scripted answer as vLLM's qwen3 parser leaves it:
// the text after </think>, its leading blank line included.
func isPlainAnswer(content string) bool {
	return strings.HasPrefix(content, "\n\n") && contains(plainAnswers, strings.TrimPrefix(content, "\n\n"))
}

// toolReply is a Qwen3 answer that reasons, then calls a tool in the Hermes format.
const toolReply = "<think>\nThe user asks for the current weather in Paris; I should call the tool.\n</think>\n\n" +
	"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>"

// TestChatWorkers is issues 12 and 13 end to end with the official openai npm client, over
// grpc:// workers (the gateway renders each request with the model's template, sends the ids
// to the simulators' SMG vLLM service and builds chat.completion(.chunk) from the generated
// tokens, with Qwen3's reasoning and Hermes tool calls split out by the parsers the model family
// implies) and over http:// workers (each simulator renders and parses itself, as `vllm serve
// --reasoning-parser qwen3 --tool-call-parser hermes`; the gateway routes on its own rendering).
// The same assertions run on both, so the two paths agree in shape. A conversation's later turns
// land on the worker that served its earlier turns, because that worker's KV events hold the
// history; over HTTP that also proves the gateway's rendering equals the engine's (the events
// carry the engine's ids, the gateway matches them with its own).
func TestChatWorkers(t *testing.T) {
	for _, kind := range []string{"grpc", "http"} {
		t.Run(kind, func(t *testing.T) {
			l := newLauncher(t)
			ports := testutil.FreePorts(t, 4)
			// worker starts a simulator scripted with replies and returns its --worker spec.
			worker := func(i int, replies string) string {
				name := fmt.Sprintf("%s-chat-%d", kind, i)
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
			t.Run("plain", func(t *testing.T) { checkPlainChat(t, runChatClient(t, gw.URL, "plain")) })
			t.Run("turns", func(t *testing.T) { checkChatTurns(t, runChatClient(t, gw.URL, "turns", "3", "4")) })
			if kind == "grpc" {
				t.Run("hostile template", func(t *testing.T) {
					checkHostileTemplates(t, startGateway(t, l, harness.GatewayOptions{Name: "gateway-trust", Workers: specs, Args: []string{"--trust-request-chat-template"}}))
				})
			}
			t.Run("tools", func(t *testing.T) {
				tgw := startGateway(t, l, harness.GatewayOptions{Name: "gateway-tools", Workers: []string{worker(3, replyFile(t, toolReply))}})
				r := runChatClient(t, tgw.URL, "tools")
				// reasoning is the field current vLLM (and the simulator) writes; the gateway writes
				// reasoning_content too (--reasoning-field both).
				ns := r.Nonstream.Message
				checkToolAnswer(t, "non-streaming", ns.Reasoning, ns.Content, r.Nonstream.FinishReason, toolCalls(ns.ToolCalls))
				content := &r.Stream.Content
				if *content == "" {
					content = nil
				}
				checkToolAnswer(t, "streaming", &r.Stream.Reasoning, content, r.Stream.FinishReason, toolCalls(r.Stream.ToolCalls))
				if kind == "grpc" && (deref(ns.ReasoningContent) != deref(ns.Reasoning) || r.Stream.Reasoning != r.Stream.ReasoningContent) {
					t.Errorf("reasoning and reasoning_content differ (--reasoning-field both): %v / %v, streamed %q / %q",
						deref(ns.Reasoning), deref(ns.ReasoningContent), r.Stream.Reasoning, r.Stream.ReasoningContent)
				}
			})
		})
	}
}

// checkPlainChat checks chat.mjs's plain report: envelope, the think block split out, the
// answer as content, usage (cached on the repeat).
func checkPlainChat(t *testing.T, r chatReport) {
	ns := r.Nonstream
	if ns.Object != "chat.completion" || !strings.HasPrefix(ns.ID, "chatcmpl-") || ns.Model != testModel {
		t.Errorf("envelope: got object %q id %q model %q", ns.Object, ns.ID, ns.Model)
	}
	if ns.Message.Role != "assistant" || ns.Message.Content == nil || !isPlainAnswer(*ns.Message.Content) || ns.FinishReason != "stop" || len(ns.Message.ToolCalls) != 0 {
		t.Errorf("message: got %+v (content %v) finish %q, want one of the scripted answers, stop", ns.Message, deref(ns.Message.Content), ns.FinishReason)
	}
	want := "\n" + plainThought + "\n"
	if deref(ns.Message.Reasoning) != want {
		t.Errorf("reasoning: got %v, want %q", deref(ns.Message.Reasoning), want)
	}
	if ns.Message.ReasoningContent != nil && *ns.Message.ReasoningContent != want {
		t.Errorf("reasoning_content: got %q, want %q or absent", *ns.Message.ReasoningContent, want)
	}
	if ns.Usage == nil || ns.Usage.PromptTokens < 40 || ns.Usage.CompletionTokens < 5 {
		t.Errorf("usage: got %+v", ns.Usage)
	}
	st := r.Stream
	if st.FirstRole != "assistant" || !isPlainAnswer(st.Content) || st.Reasoning != want || st.FinishReason != "stop" || st.Chunks < 5 {
		t.Errorf("stream: got %+v", st)
	}
	if st.Usage == nil || ns.Usage == nil || st.Usage.PromptTokens != ns.Usage.PromptTokens || st.Usage.PromptTokensDetails == nil || st.Usage.PromptTokensDetails.CachedTokens <= 0 {
		t.Errorf("stream usage: got %+v, want the same prompt, now cached", st.Usage)
	}
}

// checkChatTurns checks chat.mjs's turns report: every later turn of a session on the worker of
// its first turn by cache_hit, the gateway's match and the engine's cache covering the previous
// turn's prompt.
func checkChatTurns(t *testing.T, r chatReport) {
	if len(r.Sessions) != 3 {
		t.Errorf("sessions: got %d, want 3", len(r.Sessions))
	}
	for s, turns := range r.Sessions {
		for i, tr := range turns {
			if tr.Worker == "" || !isPlainAnswer(tr.Answer) {
				t.Errorf("session %d turn %d: worker %q answer %q", s, i, tr.Worker, tr.Answer)
			}
			if i == 0 {
				continue
			}
			if tr.Worker != turns[0].Worker || tr.Reason != "cache_hit" {
				t.Errorf("session %d turn %d went to %s (%s), want %s (cache_hit): the worker holding its history", s, i, tr.Worker, tr.Reason, turns[0].Worker)
			}
			// Everything up to the previous turn's prompt is in the engine's cache (16-token
			// blocks), and the gateway's index, fed by the engine's events, matched as much.
			prev := turns[i-1].PromptTokens
			if tr.CachedTokens < prev-16 || tr.MatchedBlocks < prev/16-1 {
				t.Errorf("session %d turn %d: %d cached tokens and %d matched blocks, want about the previous prompt's %d tokens", s, i, tr.CachedTokens, tr.MatchedBlocks, prev)
			}
		}
	}
}

type toolCall struct{ ID, Type, Name, Arguments string }

func toolCalls[T ~struct{ ID, Type, Name, Arguments string }](in []T) []toolCall {
	out := make([]toolCall, len(in))
	for i, c := range in {
		out[i] = toolCall(c)
	}
	return out
}

// checkToolAnswer checks toolReply as the client sees it: the reasoning split out, no content,
// one get_weather call with its arguments, finish_reason tool_calls.
func checkToolAnswer(t *testing.T, what string, reasoning, content *string, finish string, calls []toolCall) {
	t.Helper()
	if reasoning == nil || !strings.Contains(*reasoning, "current weather in Paris") || strings.Contains(*reasoning, "think>") {
		t.Errorf("%s: reasoning %v, want the think block's text", what, deref(reasoning))
	}
	if content != nil && strings.TrimSpace(*content) != "" {
		t.Errorf("%s: content %q, want none beside the tool call", what, *content)
	}
	if finish != "tool_calls" || len(calls) != 1 {
		t.Fatalf("%s: finish %q, calls %+v; want one call and tool_calls", what, finish, calls)
	}
	c := calls[0]
	var args map[string]any
	if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
		t.Errorf("%s: arguments %q are not JSON: %v", what, c.Arguments, err)
	}
	if c.Name != "get_weather" || c.Type != "function" || !strings.HasPrefix(c.ID, "chatcmpl-tool-") ||
		!cmp.Equal(args, map[string]any{"city": "Paris", "unit": "celsius"}) {
		t.Errorf("%s: call %+v", what, c)
	}
}

func deref(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkHostileTemplates sends request chat_templates that loop, recurse and explode to a gateway
// started with --trust-request-chat-template: each is answered 400 (the sandbox child is stopped
// by its deadline or its caps), and while the slowest of them renders, ordinary chat requests,
// plain and streaming, are served; the gateway is healthy after.
func checkHostileTemplates(t *testing.T, gw *harness.Gateway) {
	post := func(body string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return -1, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	hostile := func(tmpl string) string {
		b, _ := json.Marshal(map[string]any{"model": testModel, "max_tokens": 4, "chat_template": tmpl,
			"messages": []map[string]string{{"role": "user", "content": "hi"}}})
		return string(b)
	}
	type answer struct {
		name   string
		status int
		body   string
	}
	templates := []struct{ name, tmpl string }{
		{"loop beyond the deadline", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"},
		{"macro recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"},
		{"giant output", "{% for i in range(100000) %}{{ 'x' * 10000 }}{% endfor %}"},
	}
	answers := make(chan answer, len(templates))
	slow := make(chan struct{})
	for i, h := range templates {
		go func() {
			st, b := post(hostile(h.tmpl))
			if i == 0 {
				close(slow)
			}
			answers <- answer{h.name, st, b}
		}()
	}
	time.Sleep(200 * time.Millisecond) // the hostile renders are under way
	for _, stream := range []bool{false, true, false} {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"what is the capital of France?"}],"max_tokens":8,"stream":%v}`, testModel, stream)
		if st, b := post(body); st != http.StatusOK || !strings.Contains(b, `"chat.completion`) {
			t.Errorf("ordinary request (stream %v) beside the hostile templates: got %d %s", stream, st, b)
		}
	}
	select {
	case <-slow:
		t.Error("the looping template was answered before the ordinary requests: the test did not overlap them")
	default:
	}
	for range templates {
		a := <-answers
		if a.status != http.StatusBadRequest || !strings.Contains(a.body, `"invalid_request_error"`) {
			t.Errorf("%s: got %d %s, want 400 invalid_request_error", a.name, a.status, a.body)
		}
	}
	if resp, err := http.Get(gw.URL + "/health"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("gateway unhealthy after the hostile templates: %v", err)
	} else {
		resp.Body.Close()
	}
}

// familyThought is the reasoning of every family's scripted reply in TestChatParserFamilies.
const familyThought = "The user asks for the current weather in Paris; I should call the tool."

// TestChatParserFamilies runs one scripted tool-calling exchange per output format through a
// grpc:// simulator and the gateway started with that family's parsers, with the official
// openai npm client, streamed and not: the same call (get_weather, Paris, celsius) and
// reasoning come out of every format. The simulator speaks Qwen3's tokenizer; the formats'
// markers are then ordinary text, which the gateway decodes back as written.
func TestChatParserFamilies(t *testing.T) {
	think := "<think>\n" + familyThought + "\n</think>"
	jsonArgs := `{"city": "Paris", "unit": "celsius"}`
	families := []struct {
		reasoning, tool, reply string
		id                     *regexp.Regexp
	}{
		{"qwen3", "qwen3_coder", think + "\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>", callID},
		{"glm45", "glm45", think + "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>", toolID},
		{"kimi_k2", "kimi_k2", think + "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>" + jsonArgs + "<|tool_call_end|><|tool_calls_section_end|>",
			regexp.MustCompile(`^functions\.get_weather:0$`)},
		{"deepseek_r1", "deepseek_v31", think + "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" + jsonArgs + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", toolID},
		{"minimax_m2", "minimax_m2", think + "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n<parameter name=\"unit\">celsius</parameter>\n</invoke>\n</minimax:tool_call>", callID},
		{"seed_oss", "seed_oss", "<seed:think>\n" + familyThought + "\n</seed:think><seed:tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</seed:tool_call>", callID},
		{"mistral", "mistral", "[THINK]" + familyThought + "[/THINK][TOOL_CALLS]get_weather[ARGS]" + jsonArgs, regexp.MustCompile(`^[A-Za-z0-9]{9}$`)},
		{"step3", "granite", familyThought + "</think><|tool_call|>[{\"name\": \"get_weather\", \"arguments\": " + jsonArgs + "}]", toolID},
		{"qwen3", "llama4_pythonic", think + "[get_weather(city=\"Paris\", unit='celsius')]", toolID},
		{"step3", "step3", familyThought + "</think><｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"get_weather\">" +
			"<steptml:parameter name=\"city\">Paris</steptml:parameter><steptml:parameter name=\"unit\">celsius</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>", toolID},
		{"deepseek_r1", "deepseek_v32", think + "\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n" +
			"<｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>", callID},
		{"granite", "granite", "Here is my thought process:\n" + familyThought + "\nHere is my response:\n<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": " + jsonArgs + "}]", toolID},
	}
	l := newLauncher(t)
	ports := testutil.FreePorts(t, len(families))
	for i, f := range families {
		t.Run(f.reasoning+"+"+f.tool, func(t *testing.T) {
			name := fmt.Sprintf("family-%d", i)
			startSim(t, l, harness.SimOptions{Name: name, Args: []string{"--grpc-port", fmt.Sprint(ports[i]), "--runtime", "vllm", "--reply-file", replyFile(t, f.reply)}})
			gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway-" + name, Workers: []string{fmt.Sprintf("url=grpc://127.0.0.1:%d,runtime=vllm", ports[i])},
				Args: []string{"--reasoning-parser", f.reasoning, "--tool-call-parser", f.tool}})
			r := runChatClient(t, gw.URL, "tools")
			ns := r.Nonstream.Message
			checkFamilyAnswer(t, "non-streaming", ns.Reasoning, ns.Content, r.Nonstream.FinishReason, toolCalls(ns.ToolCalls), f.id)
			checkFamilyAnswer(t, "streaming", &r.Stream.Reasoning, &r.Stream.Content, r.Stream.FinishReason, toolCalls(r.Stream.ToolCalls), f.id)
		})
	}
}

var (
	toolID = regexp.MustCompile(`^chatcmpl-tool-[0-9a-f]{32}$`)
	callID = regexp.MustCompile(`^call_[0-9a-f]{24}$`)
)

// checkFamilyAnswer is checkToolAnswer with the family's id form.
func checkFamilyAnswer(t *testing.T, what string, reasoning, content *string, finish string, calls []toolCall, id *regexp.Regexp) {
	t.Helper()
	if reasoning == nil || strings.TrimSpace(*reasoning) != familyThought {
		t.Errorf("%s: reasoning %v, want %q", what, deref(reasoning), familyThought)
	}
	if content != nil && strings.TrimSpace(*content) != "" {
		t.Errorf("%s: content %q, want none beside the tool call", what, *content)
	}
	if finish != "tool_calls" || len(calls) != 1 {
		t.Fatalf("%s: finish %q, calls %+v; want one call and tool_calls", what, finish, calls)
	}
	c := calls[0]
	var args map[string]any
	if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
		t.Errorf("%s: arguments %q are not JSON: %v", what, c.Arguments, err)
	}
	if c.Name != "get_weather" || c.Type != "function" || !id.MatchString(c.ID) ||
		!cmp.Equal(args, map[string]any{"city": "Paris", "unit": "celsius"}) {
		t.Errorf("%s: call %+v", what, c)
	}
}
