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
)

// fakeAgentServer answers /v1/responses as a model behind the Responses API does in an agent
// loop: a user message gets a call of the tool, a tool result gets an answer, streamed as the
// named events. It keeps every request and the output it answered.
type fakeAgentServer struct {
	srv *httptest.Server
	mu  sync.Mutex // guards turns
	// turns are the requests in arrival order, each with its response's id and output.
	turns []agentTurn
}

type agentTurn struct {
	body   responsesBody
	id     string
	output []json.RawMessage
}

func newFakeAgentServer(t *testing.T) *fakeAgentServer {
	f := &fakeAgentServer{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/responses" {
			http.NotFound(w, r)
			return
		}
		var b responsesBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil || len(b.Input) == 0 {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		var first struct{ Type string }
		_ = json.Unmarshal(b.Input[0], &first)
		f.mu.Lock()
		n := len(f.turns)
		id := fmt.Sprintf("resp_%032x", n)
		var item, delta string
		if first.Type == "function_call_output" {
			item = fmt.Sprintf(`{"type":"message","id":"msg_%d","role":"assistant","status":"completed","content":[{"type":"output_text","text":"It is in the north.","annotations":[]}]}`, n)
			delta = `{"type":"response.output_text.delta","delta":"It is in the north."}`
		} else {
			item = fmt.Sprintf(`{"type":"function_call","id":"fc_%d","call_id":"call_%d","name":"lookup","arguments":"{\"query\": \"where\"}","status":"completed"}`, n, n)
			delta = `{"type":"response.function_call_arguments.delta","delta":"{\"query\": \"where\"}"}`
		}
		f.turns = append(f.turns, agentTurn{body: b, id: id, output: []json.RawMessage{json.RawMessage(item)}})
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":%q,\"status\":\"in_progress\",\"output\":[]}}\n\n", id)
		fmt.Fprintf(w, "data: %s\n\n", delta)
		fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":%q,\"status\":\"completed\",\"output\":[%s],"+
			"\"usage\":{\"input_tokens\":50,\"input_tokens_details\":{\"cached_tokens\":20},\"output_tokens\":7}}}\n\n", id, item)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// str is v when it is a string, else "".
func str(v any) string {
	s, _ := v.(string)
	return s
}

// TestEndToEndResponses runs the responses workload against the fake agent: each session's
// turns continue each other by previous_response_id, a tool call is answered with its result
// (by call_id) and an answer with the next user message, and the ideal is the hit of each
// turn's ids (the conversation as the gateway renders it) on the previous turn's ids
// extended by its answer, which must reach past the previous prompt into the answer.
func TestEndToEndResponses(t *testing.T) {
	path, c := realTokenizer(t, "qwen3")
	dir := filepath.Dir(path)
	f := newFakeAgentServer(t)
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	_, stderr, err := runLoadgen(t, "--url", f.srv.URL, "--model", "m", "--tokenizer", dir, "--workload", "responses",
		"--num-requests", "8", "--turns", "4", "--system-tokens", "30", "--user-tokens", "12", "--tool-tokens", "9", "--output-tokens", "64",
		"--json", jsonPath)
	if err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, stderr)
	}
	f.mu.Lock()
	turns := append([]agentTurn(nil), f.turns...)
	f.mu.Unlock()
	if len(turns) != 8 {
		t.Fatalf("server got %d requests, want 8", len(turns))
	}
	byID := map[string]int{}
	for i, tn := range turns {
		byID[tn.id] = i
	}
	ci, err := loadChatIDs(dir, "", c.t)
	if err != nil || ci == nil {
		t.Fatalf("loadChatIDs: %v %v", ci, err)
	}
	a, err := newAgentIDs(ci)
	if err != nil {
		t.Fatal(err)
	}
	var hit, total, sessions int
	conv := map[string][]json.RawMessage{} // a response's id → the conversation through its output
	prevIDs := map[string][]uint32{}       // → the ids of its prompt
	var first []uint32
	for i, tn := range turns {
		b := tn.body
		if !b.Stream || b.Model != "m" || b.MaxOutputTokens != 64 || string(b.Tools) != string(agentTool) || b.Store != nil {
			t.Errorf("request %d: got %+v; want a streaming, stored request with the tool and max_output_tokens 64", i, b)
		}
		if ids, err := c.encode(b.Instructions); err != nil || len(ids) != 30 {
			t.Errorf("request %d: instructions of %d tokens (%v), want 30", i, len(ids), err)
		}
		var in []map[string]any
		for _, raw := range b.Input {
			var m map[string]any
			_ = json.Unmarshal(raw, &m)
			in = append(in, m)
		}
		var items []json.RawMessage
		if b.PreviousID == "" {
			sessions++
			if len(in) != 1 || in[0]["type"] != "message" || in[0]["role"] != "user" {
				t.Errorf("request %d starts a session with %v, want a user message", i, in)
			}
		} else {
			p, ok := byID[b.PreviousID]
			if !ok || p >= i {
				t.Fatalf("request %d continues %q, which no earlier turn answered", i, b.PreviousID)
			}
			var prevOut struct{ Type, Call_ID string }
			_ = json.Unmarshal(turns[p].output[0], &prevOut)
			want := []map[string]any{{"type": "message", "role": "user"}}
			if prevOut.Type == "function_call" {
				want = []map[string]any{{"type": "function_call_output", "call_id": fmt.Sprintf("call_%d", p)}}
			}
			got := []map[string]any{{}}
			for k := range want[0] {
				got[0][k] = in[0][k]
			}
			if len(in) != 1 || !cmp.Equal(want, got) {
				t.Errorf("request %d after %s: input %v, want %v", i, prevOut.Type, in, want)
			}
			items = append(items, conv[b.PreviousID]...)
		}
		history := items
		items = append(items[:len(items):len(items)], b.Input...)
		ids, err := a.ids(b.Instructions, items)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case b.PreviousID != "":
			h, err := a.historyHit(b.Instructions, history, b.Input[0], ids)
			if err != nil {
				t.Fatal(err)
			}
			// Past the previous prompt (into its answer), short of this turn's input text.
			text, _ := c.encode(str(in[0]["content"]) + str(in[0]["output"]))
			if h <= len(prevIDs[b.PreviousID]) || h > len(ids)-len(text) {
				t.Errorf("request %d: ideal hit %d, want past the previous prompt's %d ids and at most %d (before the input's %d tokens of text)",
					i, h, len(prevIDs[b.PreviousID]), len(ids)-len(text), len(text))
			}
			hit += h
		case first == nil:
			first = ids
		default:
			hit += commonPrefix(ids, first)
		}
		total += len(ids)
		conv[tn.id] = append(items, tn.output...)
		prevIDs[tn.id] = ids
	}
	if sessions != 2 {
		t.Errorf("%d sessions, want 2", sessions)
	}
	rep := readReport(t, jsonPath)
	if rep.IdealHitRate == nil || *rep.IdealHitRate != float64(hit)/float64(total) || rep.IdealNote != "" {
		t.Errorf("ideal hit rate %v (%q), want %d/%d", rep.IdealHitRate, rep.IdealNote, hit, total)
	}
	if rep.Completed != 8 || rep.Errors != 0 || rep.OutputTokens != 56 || rep.URL != f.srv.URL+"/v1/responses" || rep.UsageCachedRate == nil || *rep.UsageCachedRate != 0.4 {
		t.Errorf("completed %d errors %d output tokens %d url %s usage cached %v; want 8, 0, 56, the responses endpoint, 0.4",
			rep.Completed, rep.Errors, rep.OutputTokens, rep.URL, rep.UsageCachedRate)
	}
	if rep.TTFTms.P50 <= 0 {
		t.Errorf("TTFT not measured: %+v", rep.TTFTms)
	}
}
