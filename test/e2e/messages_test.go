//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/harness"
	"github.com/kvgate/kvgate/internal/testutil"
)

// anthropicMessage is a message as messages.mjs summarises it.
type anthropicMessage struct {
	ID         string  `json:"id"`
	Type       string  `json:"type"`
	Role       string  `json:"role"`
	Model      string  `json:"model"`
	StopReason string  `json:"stop_reason"`
	StopSeq    *string `json:"stop_sequence"`
	Content    []struct {
		Type, Text, Thinking, ID, Name string
		Input                          map[string]any
	} `json:"content"`
	Usage struct {
		InputTokens   int `json:"input_tokens"`
		OutputTokens  int `json:"output_tokens"`
		CacheRead     int `json:"cache_read_input_tokens"`
		CacheCreation int `json:"cache_creation_input_tokens"`
	} `json:"usage"`
	Worker string   `json:"worker"`
	Reason string   `json:"reason"`
	Events []string `json:"events"`
	Text   string   `json:"text"`
}

// prompt is the whole prompt in Anthropic's accounting.
func (m *anthropicMessage) prompt() int { return m.Usage.InputTokens + m.Usage.CacheRead }

// types lists the message's content block types.
func (m *anthropicMessage) types() []string {
	var out []string
	for _, b := range m.Content {
		out = append(out, b.Type)
	}
	return out
}

// TestMessagesWorkers is issue 23's Messages API end to end with the official @anthropic-ai/sdk
// client, over grpc:// workers (the gateway renders the converted chat request, sends the ids
// and builds the answer from the generated tokens with Qwen3's parsers) and over http:// workers
// (the simulators get the converted chat request and render and parse it themselves, as `vllm
// serve --reasoning-parser qwen3 --tool-call-parser hermes`): messages.create and
// messages.stream with a system prompt (thinking and text blocks); an agent turn with a tool
// (tool_use), countTokens of its follow-up equal to the engine's prompt, and the tool_result
// follow-up streamed, landing on the worker that served the first turn with
// cache_read_input_tokens covering it; bad input as the client's typed errors.
func TestMessagesWorkers(t *testing.T) {
	for _, kind := range []string{"grpc", "http"} {
		t.Run(kind, func(t *testing.T) {
			l := newLauncher(t)
			ports := testutil.FreePorts(t, 4)
			worker := func(i int, replies string) string {
				name := fmt.Sprintf("%s-msg-%d", kind, i)
				if kind == "grpc" {
					startSim(t, l, harness.SimOptions{Name: name, Args: []string{"--grpc-port", fmt.Sprint(ports[i]), "--runtime", "vllm", "--reply-file", replies}})
					return fmt.Sprintf("url=grpc://127.0.0.1:%d,runtime=vllm", ports[i])
				}
				s := startSim(t, l, harness.SimOptions{Name: name, Events: true,
					Args: []string{"--reply-file", replies, "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes"}})
				return s.WorkerSpec(true)
			}
			plain := replyFile(t, plainReplies()...)
			gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: []string{worker(0, plain), worker(1, plain)}})
			t.Run("plain", func(t *testing.T) { checkMessagesPlain(t, gw.URL) })
			t.Run("errors", func(t *testing.T) { checkMessagesErrors(t, gw.URL) })
			tools := replyFile(t, toolReply, toolFinal)
			tgw := startGateway(t, l, harness.GatewayOptions{Name: "gateway-tools", Workers: []string{worker(2, tools), worker(3, tools)}})
			t.Run("agent", func(t *testing.T) { checkMessagesAgent(t, tgw.URL) })
		})
	}
}

// runMessages runs messages.mjs in mode against the gateway at base.
func runMessages(t *testing.T, base, mode string, v any) {
	t.Helper()
	stdout, _ := runNode(t, "messages.mjs", base, testModel, mode)
	t.Logf("messages.mjs %s: %s", mode, stdout)
	if err := json.Unmarshal(stdout, v); err != nil {
		t.Fatalf("messages.mjs output %q: %v", stdout, err)
	}
}

func checkMessagesPlain(t *testing.T, base string) {
	var r struct{ Create, Stream anthropicMessage }
	runMessages(t, base, "plain", &r)
	for _, m := range []*anthropicMessage{&r.Create, &r.Stream} {
		if m.Type != "message" || m.Role != "assistant" || m.Model != testModel || !strings.HasPrefix(m.ID, "msg_") || m.StopReason != "end_turn" || m.StopSeq != nil {
			t.Errorf("envelope %+v", m)
		}
		if got := m.types(); !slices.Equal(got, []string{"thinking", "text"}) || m.Content[0].Thinking != "\n"+plainThought+"\n" || !isPlainAnswer(m.Content[1].Text) {
			t.Errorf("content %+v, want the thinking block, then a scripted answer", m.Content)
		}
		if m.Usage.InputTokens+m.Usage.CacheRead < 40 || m.Usage.OutputTokens < 5 || m.Usage.CacheCreation != 0 {
			t.Errorf("usage %+v", m.Usage)
		}
	}
	st := &r.Stream
	if st.prompt() != r.Create.prompt() || st.Usage.CacheRead <= 0 || st.Worker != r.Create.Worker {
		t.Errorf("the streamed repeat: prompt %d (cached %d) on %s, want create's %d tokens, cached, on %s", st.prompt(), st.Usage.CacheRead, st.Worker, r.Create.prompt(), r.Create.Worker)
	}
	// The client does not surface ping events (the router's tests see them on the wire).
	want := []string{"message_start", "content_block_start", "content_block_delta:thinking_delta", "content_block_delta:signature_delta", "content_block_stop",
		"content_block_start", "content_block_delta:text_delta", "content_block_stop", "message_delta", "message_stop"}
	if got := slices.Compact(slices.Clone(st.Events)); !slices.Equal(got, want) {
		t.Errorf("stream events %v, want (repeats folded) %v", st.Events, want)
	}
	if st.Text != st.Content[1].Text {
		t.Errorf("text deltas %q, final text %q", st.Text, st.Content[1].Text)
	}
}

func checkMessagesAgent(t *testing.T, base string) {
	var r struct {
		First  anthropicMessage
		Count  int
		Second anthropicMessage
	}
	runMessages(t, base, "agent", &r)
	f := &r.First
	// The text between the think block and the call is a text block, as vLLM's Hermes parser
	// leaves it in content and its Anthropic serving keeps any non-empty content.
	if got := f.types(); !slices.Equal(got, []string{"thinking", "text", "tool_use"}) || f.StopReason != "tool_use" ||
		!strings.Contains(f.Content[0].Thinking, "current weather in Paris") || f.Content[1].Text != "\n\n" {
		t.Fatalf("first turn %+v, want thinking, the text before the call, a tool_use, stop_reason tool_use", f)
	}
	use := f.Content[2]
	if use.Name != "get_weather" || !strings.HasPrefix(use.ID, "toolu_") || use.Input["city"] != "Paris" || use.Input["unit"] != "celsius" {
		t.Errorf("tool_use %+v", use)
	}
	s := &r.Second
	if s.Text != toolFinal || len(s.Content) != 1 || s.Content[0].Text != toolFinal || s.StopReason != "end_turn" {
		t.Errorf("follow-up %+v, want the scripted answer to the tool result", s)
	}
	if s.Worker != f.Worker || s.Reason != "cache_hit" {
		t.Errorf("follow-up went to %s (%s), want %s (cache_hit): the worker holding the first turn", s.Worker, s.Reason, f.Worker)
	}
	if s.Usage.CacheRead < f.prompt()-16 {
		t.Errorf("follow-up: %d cached tokens, want about the first turn's %d-token prompt", s.Usage.CacheRead, f.prompt())
	}
	if r.Count != s.prompt() {
		t.Errorf("countTokens %d, the engine's prompt %d (%d input + %d cached)", r.Count, s.prompt(), s.Usage.InputTokens, s.Usage.CacheRead)
	}
	if !slices.Contains(s.Events, "content_block_delta:text_delta") || s.Events[0] != "message_start" || s.Events[len(s.Events)-1] != "message_stop" {
		t.Errorf("follow-up events %v", s.Events)
	}
}

func checkMessagesErrors(t *testing.T, base string) {
	type typed struct {
		Status      int
		Class, Type string
		Message     string
	}
	var r struct {
		NoMaxTokens  typed `json:"no_max_tokens"`
		OrphanResult typed `json:"orphan_result"`
		UnknownModel typed `json:"unknown_model"`
	}
	runMessages(t, base, "errors", &r)
	for _, tt := range []struct {
		got                 typed
		status              int
		class, typ, message string
	}{
		{r.NoMaxTokens, 400, "BadRequestError", "invalid_request_error", "max_tokens"},
		{r.OrphanResult, 400, "BadRequestError", "invalid_request_error", "answers no tool_use"},
		{r.UnknownModel, 404, "NotFoundError", "not_found_error", "no-such-model"},
	} {
		if tt.got.Status != tt.status || tt.got.Class != tt.class || tt.got.Type != tt.typ || !strings.Contains(tt.got.Message, tt.message) {
			t.Errorf("got %+v, want %d %s %s containing %q", tt.got, tt.status, tt.class, tt.typ, tt.message)
		}
	}
}

// editReply is a scripted Hermes tool call whose arguments nest an array of objects, escapes
// and non-ASCII text, so the streamed fragments only parse once joined.
const editReply = "<think>\nThe greeting is wrong; edit the file.\n</think>\n\n" +
	"<tool_call>\n{\"name\": \"edit_file\", \"arguments\": {\"path\": \"cmd/hello/main.go\", \"edits\": [{\"line\": 7, \"text\": \"\\tfmt.Println(\\\"héllo, wörld\\\")\"}, {\"line\": 9, \"text\": \"}\"}], \"dry_run\": false}}\n</tool_call>"

// TestMessagesToolStream: a streamed tool-use turn with the official @anthropic-ai/sdk client,
// over a grpc:// and an http:// worker scripted to call a tool: the arguments arrive as
// input_json_delta events (more than one) whose fragments join to the whole JSON input, and the SDK's final
// message carries the tool_use block with that input parsed.
func TestMessagesToolStream(t *testing.T) {
	want := map[string]any{"path": "cmd/hello/main.go", "edits": []any{map[string]any{"line": 7.0, "text": "\tfmt.Println(\"héllo, wörld\")"},
		map[string]any{"line": 9.0, "text": "}"}}, "dry_run": false}
	for _, kind := range []string{"grpc", "http"} {
		t.Run(kind, func(t *testing.T) {
			l := newLauncher(t)
			replies := replyFile(t, editReply)
			var spec string
			if kind == "grpc" {
				port := testutil.FreePorts(t, 1)[0]
				startSim(t, l, harness.SimOptions{Name: "grpc-edit", Args: []string{"--grpc-port", fmt.Sprint(port), "--runtime", "vllm", "--reply-file", replies}})
				spec = fmt.Sprintf("url=grpc://127.0.0.1:%d,runtime=vllm", port)
			} else {
				s := startSim(t, l, harness.SimOptions{Name: "http-edit", Events: true,
					Args: []string{"--reply-file", replies, "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes"}})
				spec = s.WorkerSpec(true)
			}
			gw := startGateway(t, l, harness.GatewayOptions{Name: "gateway", Workers: []string{spec}})
			var r struct {
				Stream struct {
					anthropicMessage
					Partials []string       `json:"partials"`
					Snapshot map[string]any `json:"snapshot"`
				}
			}
			runMessages(t, gw.URL, "tool_stream", &r)
			m := &r.Stream
			if got := m.types(); !slices.Equal(got, []string{"thinking", "text", "tool_use"}) || m.StopReason != "tool_use" {
				t.Fatalf("final message %+v, want thinking, text, tool_use and stop_reason tool_use", m.anthropicMessage)
			}
			use := m.Content[2]
			if use.Name != "edit_file" || !strings.HasPrefix(use.ID, "toolu_") || !reflect.DeepEqual(use.Input, want) {
				t.Errorf("tool_use %+v, want edit_file with input %v", use, want)
			}
			deltas := 0
			for _, e := range m.Events {
				if e == "content_block_delta:input_json_delta" {
					deltas++
				}
			}
			var joined map[string]any
			if err := json.Unmarshal([]byte(strings.Join(m.Partials, "")), &joined); err != nil || deltas < 2 || deltas != len(m.Partials) ||
				!reflect.DeepEqual(joined, want) || !reflect.DeepEqual(m.Snapshot, want) {
				t.Errorf("%d input_json_delta events, fragments %q (%v), snapshot %v: want fragments joining to %v", deltas, m.Partials, err, m.Snapshot, want)
			}
			t.Logf("%s: the arguments arrived in %d input_json_delta events", kind, deltas)
		})
	}
}
