package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/anthropic"
)

// fakeMessagesServer answers /v1/messages as a coding agent's model does: a user text gets a
// tool_use, a tool_result gets a text answer, streamed as Anthropic's events. It keeps every
// body and the content it answered.
type fakeMessagesServer struct {
	srv *httptest.Server
	mu  sync.Mutex // guards turns
	// turns are the bodies in arrival order with the content answered.
	turns []messagesTurn
}

type messagesTurn struct {
	body   messagesBody
	raw    []byte
	answer []json.RawMessage
}

func newFakeMessagesServer(t *testing.T) *fakeMessagesServer {
	f := &fakeMessagesServer{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages" || r.Header.Get("anthropic-version") == "" {
			http.NotFound(w, r)
			return
		}
		var raw json.RawMessage
		var b messagesBody
		if err := json.NewDecoder(r.Body).Decode(&raw); err != nil || json.Unmarshal(raw, &b) != nil || len(b.Messages) == 0 {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		last := b.Messages[len(b.Messages)-1]
		var first struct{ Type string }
		_ = json.Unmarshal(last.Content[0], &first)
		f.mu.Lock()
		n := len(f.turns)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[]}}\n\n")
		var answer json.RawMessage
		if first.Type == "tool_result" {
			answer = json.RawMessage(`{"type":"text","text":"The tests pass now."}`)
			fmt.Fprint(w, "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
			fmt.Fprint(w, "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"The tests \"}}\n\n")
			fmt.Fprint(w, "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"pass now.\"}}\n\n")
		} else {
			id := fmt.Sprintf("toolu_%024d", n)
			answer = json.RawMessage(`{"type":"tool_use","id":"` + id + `","name":"run_command","input":{"command":"go test ./..."}}`)
			fmt.Fprintf(w, "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":%q,\"name\":\"run_command\",\"input\":{}}}\n\n", id)
			fmt.Fprint(w, "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\": \"}}\n\n")
			fmt.Fprint(w, "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"go test ./...\\\"}\"}}\n\n")
		}
		f.turns = append(f.turns, messagesTurn{body: b, raw: raw, answer: []json.RawMessage{answer}})
		f.mu.Unlock()
		fmt.Fprint(w, "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
		fmt.Fprint(w, "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"input_tokens\":30,\"output_tokens\":6,\"cache_read_input_tokens\":20}}\n\n")
		fmt.Fprint(w, "data: {\"type\":\"message_stop\"}\n\n")
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// TestEndToEndMessages runs the messages workload against the fake model: every turn resends
// the system prompt, the tools and the conversation with each answer's blocks as it streamed
// them, a tool_use is followed by its tool_result (by id) and a text answer by the next user
// message; the ideal of each later turn reaches past what it shares with the previous prompt
// (into the answer) and stops before the new input's text.
func TestEndToEndMessages(t *testing.T) {
	path, c := realTokenizer(t, "qwen3")
	dir := filepath.Dir(path)
	f := newFakeMessagesServer(t)
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	_, stderr, err := runLoadgen(t, "--url", f.srv.URL, "--model", "m", "--tokenizer", dir, "--workload", "messages",
		"--num-requests", "8", "--turns", "4", "--system-tokens", "40", "--user-tokens", "12", "--tool-tokens", "9", "--output-tokens", "64",
		"--json", jsonPath)
	if err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, stderr)
	}
	f.mu.Lock()
	turns := append([]messagesTurn(nil), f.turns...)
	f.mu.Unlock()
	if len(turns) != 8 {
		t.Fatalf("server got %d requests, want 8", len(turns))
	}
	ci, err := loadChatIDs(dir, "", c.t)
	if err != nil || ci == nil {
		t.Fatalf("loadChatIDs: %v %v", ci, err)
	}
	idsOf := func(raw []byte) []uint32 {
		ar, aerr := anthropic.Parse(raw, false)
		if aerr != nil {
			t.Fatalf("the gateway's conversion refuses the body: %v\n%s", aerr, raw)
		}
		ids, err := ci.ids(ar.ChatBody())
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	var lower, upper, total, sessions int
	type last struct {
		ids  []uint32
		turn *messagesTurn
	}
	bySession := map[string]last{} // a session's first user block → its latest turn
	var lastIDs []uint32
	for i := range turns {
		tn := &turns[i]
		b := tn.body
		if !b.Stream || b.Model != "m" || b.MaxTokens != 64 || string(b.Tools) != string(codingTools) || len(b.System) != 1 {
			t.Errorf("request %d: %s; want a streaming body with the system block, the tools and max_tokens 64", i, tn.raw)
		}
		var sys struct {
			Text         string
			CacheControl map[string]string `json:"cache_control"`
		}
		_ = json.Unmarshal(b.System[0], &sys)
		if n, err := c.encode(sys.Text); err != nil || len(n) != 40 || sys.CacheControl["type"] != "ephemeral" {
			t.Errorf("request %d: system of %d tokens (%v), cache_control %v; want 40 tokens marked ephemeral", i, len(n), err, sys.CacheControl)
		}
		ids := idsOf(tn.raw)
		total += len(ids)
		lastIDs = ids
		key := string(b.Messages[0].Content[0])
		lastMsg := b.Messages[len(b.Messages)-1]
		var in struct{ Type, Text, Content, Tool_Use_ID string }
		_ = json.Unmarshal(lastMsg.Content[0], &in)
		prev, ok := bySession[key]
		bySession[key] = last{ids, tn}
		if len(b.Messages) == 1 {
			sessions++
			if ok || in.Type != "text" || lastMsg.Role != "user" {
				t.Errorf("request %d starts a session with %s", i, tn.raw)
			}
			continue
		}
		if !ok {
			t.Fatalf("request %d continues no earlier turn: %s", i, tn.raw)
		}
		// The history is the previous body's messages and the answer as streamed.
		want := append(append([]anthropicMessage(nil), prev.turn.body.Messages...), anthropicMessage{Role: "assistant", Content: prev.turn.answer})
		var got, wantV any
		g, _ := json.Marshal(b.Messages[:len(b.Messages)-1])
		w, _ := json.Marshal(want)
		_ = json.Unmarshal(g, &got)
		_ = json.Unmarshal(w, &wantV)
		if d := cmp.Diff(wantV, got); d != "" {
			t.Errorf("request %d history (-want +got):\n%s", i, d)
		}
		var ans struct{ Type, ID string }
		_ = json.Unmarshal(prev.turn.answer[0], &ans)
		if ans.Type == "tool_use" && (in.Type != "tool_result" || in.Tool_Use_ID != ans.ID) || ans.Type == "text" && in.Type != "text" {
			t.Errorf("request %d after a %s answer: input %s", i, ans.Type, lastMsg.Content[0])
		}
		newText, _ := c.encode(in.Text + in.Content)
		lower += commonPrefix(ids, prev.ids)
		upper += len(ids) - len(newText)
	}
	if sessions != 2 {
		t.Errorf("%d sessions, want 2", sessions)
	}
	rep := readReport(t, jsonPath)
	if rep.IdealHitRate == nil || rep.IdealNote != "" {
		t.Fatalf("no ideal hit rate: %q", rep.IdealNote)
	}
	// The first turns share the system prompt, the tools and the template (at least 40 tokens each).
	if got := *rep.IdealHitRate * float64(total); got <= float64(lower+40) || got > float64(upper+len(lastIDs)) {
		t.Errorf("ideal hit %.0f tokens of %d; want above the %d shared with the previous prompts plus the second first turn's system, at most %d", got, total, lower, upper+len(lastIDs))
	}
	if rep.Completed != 8 || rep.Errors != 0 || rep.OutputTokens != 48 || rep.URL != f.srv.URL+"/v1/messages" || rep.UsageCachedRate == nil || *rep.UsageCachedRate != 0.4 {
		t.Errorf("completed %d errors %d output tokens %d url %s usage cached %v; want 8, 0, 48, the messages endpoint, 0.4",
			rep.Completed, rep.Errors, rep.OutputTokens, rep.URL, rep.UsageCachedRate)
	}
	if rep.TTFTms.P50 <= 0 {
		t.Errorf("TTFT not measured: %+v", rep.TTFTms)
	}
}
