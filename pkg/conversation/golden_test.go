package conversation

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

// TestChainRendersAsChat is the exactness proof: a ten-turn stored chain (instructions, user
// turns, reasoning, a tool call and its result, answers) plus a new input renders, through the
// real renderer with Qwen3's template and tokenizer, to the same token ids as the equivalent
// chat request written by hand, so a Responses follow-up is routed on exactly the prefix the
// engine caches for the same conversation sent as chat.
func TestChainRendersAsChat(t *testing.T) {
	dir := filepath.Join("..", "..", ".cache", "tokenizers", "qwen3")
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatalf("Qwen3 model directory (make testdata): %v", err)
	}
	r, err := chat.New(dir, chat.Options{Tokenizer: tok})
	if err != nil {
		t.Fatal(err)
	}
	tools := `[{"type":"function","name":"get_weather","description":"Current weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]`
	chatTools := `[{"type":"function","function":{"name":"get_weather","description":"Current weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
	s := newService(t, nil)
	var msgs []map[string]any
	prev := ""
	for i := range 10 {
		q := fmt.Sprintf("Question %d: what about city number %d?", i, i*7)
		input := fmt.Sprintf("%q", q)
		msgs = append(msgs, map[string]any{"role": "user", "content": q})
		if i == 4 { // the previous turn called the tool: this turn answers it, then asks
			input = fmt.Sprintf(`[{"type":"function_call_output","call_id":"call_a","output":"{\"temp\": 21}"},{"role":"user","content":%q}]`, q)
			msgs = append(msgs[:len(msgs)-1], map[string]any{"role": "tool", "content": `{"temp": 21}`, "tool_call_id": "call_a"}, map[string]any{"role": "user", "content": q})
		}
		var answer []byte
		switch i {
		case 3:
			answer = completion("", "I should look it up.", [][2]string{{"get_weather", `{"city": "Lyon"}`}}, "tool_calls")
			msgs = append(msgs, map[string]any{"role": "assistant", "reasoning": "I should look it up.",
				"tool_calls": []any{map[string]any{"id": "call_a", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city": "Lyon"}`}}}})
		default:
			a := fmt.Sprintf("Answer %d: it is fine, %d degrees.", i, 10+i)
			answer = completion(a, fmt.Sprintf("Thinking about %d.", i), nil, "stop")
			msgs = append(msgs, map[string]any{"role": "assistant", "content": a, "reasoning": fmt.Sprintf("Thinking about %d.", i)})
		}
		body := fmt.Sprintf(`{"model":"qwen3","instructions":"You are terse.","tools":%s,"input":%s`, tools, input)
		if prev != "" {
			body += fmt.Sprintf(`,"previous_response_id":%q`, prev)
		}
		_, obj := turn(t, s, "k", body+"}", answer)
		prev = obj["id"].(string)
	}
	final := "And the weather tomorrow?"
	msgs = append(msgs, map[string]any{"role": "user", "content": final})
	tn, aerr := s.Begin(t.Context(), "k", mustParse(t, fmt.Sprintf(`{"model":"qwen3","instructions":"You are terse.","tools":%s,"input":%q,"previous_response_id":%q}`, tools, final, prev)))
	if aerr != nil {
		t.Fatal(aerr.Message)
	}
	got := render(t, r, tn.ChatBody(nil, 0))
	all := append([]map[string]any{{"role": "system", "content": "You are terse."}}, msgs...)
	eq, _ := json.Marshal(map[string]any{"model": "qwen3", "messages": all, "tools": json.RawMessage(chatTools)})
	want := render(t, r, eq)
	if !slices.Equal(got.TokenIDs, want.TokenIDs) {
		t.Fatalf("the chain renders to %d ids, the equivalent chat request to %d; prompts:\n%s\n----\n%s", len(got.TokenIDs), len(want.TokenIDs), got.Prompt, want.Prompt)
	}
	if len(got.TokenIDs) < 400 {
		t.Errorf("only %d ids: the conversation did not render whole", len(got.TokenIDs))
	}
	t.Logf("a 10-turn chain + new input: %d ids, equal to the chat request's", len(got.TokenIDs))
}

func render(t *testing.T, r *chat.Renderer, body []byte) chat.Result {
	t.Helper()
	req, aerr := openai.ParseChat(body, openai.Limits{})
	if aerr != nil {
		t.Fatalf("%s: %s", body, aerr.Message)
	}
	res, aerr := r.Render(req)
	if aerr != nil {
		t.Fatalf("render: %s", aerr.Message)
	}
	return res
}
