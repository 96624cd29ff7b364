package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/openai"
)

// startSim runs simworker with args (plus host, port and a fast time scale) until the test
// ends and returns its base URL.
func startSim(t *testing.T, args ...string) string {
	t.Helper()
	hp := freePort(t)
	o, err := parseFlags(append([]string{"--host", "127.0.0.1", "--port", strconv.Itoa(hp), "--model", "m",
		"--time-scale", "0.001", "--log-level", "error"}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(defaultTestTimeout):
			t.Error("run did not return")
		}
	})
	base := "http://127.0.0.1:" + strconv.Itoa(hp)
	waitHealthy(t, base)
	return base
}

func postChat(t *testing.T, base, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestChatFromModelDir: --tokenizer DIR renders chat with the directory's template (the
// prompt the gateway's renderer computes), and the parser flags turn a scripted reply into
// vLLM's reasoning and tool_calls.
func TestChatFromModelDir(t *testing.T) {
	dir := qwen3Dir(t)
	reply := "<think>\nCheck.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>"
	base := startSim(t, "--tokenizer", dir, "--reply-file", writeFile(t, "r.jsonl", strconv.Quote(reply)+"\n"),
		"--reasoning-parser", "qwen3", "--tool-call-parser", "hermes")
	body := `{"model":"m","messages":[{"role":"user","content":"Call f."}],"tools":[{"type":"function","function":{"name":"f"}}]}`
	code, b := postChat(t, base, body)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	var out openai.ChatCompletion
	if err := json.Unmarshal(b, &out); err != nil || len(out.Choices) != 1 || out.Usage == nil {
		t.Fatalf("body %s: %v", b, err)
	}
	c := out.Choices[0]
	if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "f" ||
		c.Message.ToolCalls[0].Function.Arguments != `{"x": 1}` || c.Message.Reasoning == nil || *c.Message.Reasoning != "\nCheck.\n" {
		t.Errorf("choice: %s", b)
	}
	r, err := chat.New(dir, chat.Options{Tokenizer: loadQwen3(t)})
	if err != nil {
		t.Fatal(err)
	}
	req, aerr := openai.ParseChat([]byte(body), openai.Limits{})
	if aerr != nil {
		t.Fatal(aerr)
	}
	res, aerr := r.Render(req)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if out.Usage.PromptTokens != len(res.TokenIDs) {
		t.Errorf("prompt_tokens %d, want %d (the gateway's rendering)", out.Usage.PromptTokens, len(res.TokenIDs))
	}
}

// TestChatTemplateFlag: a tokenizer.json file gives no template (vLLM's 400) unless
// --chat-template names one; without --tool-call-parser tools with tool_choice auto are
// refused as by vLLM.
func TestChatTemplateFlag(t *testing.T) {
	file := filepath.Join(qwen3Dir(t), "tokenizer.json")
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	base := startSim(t, "--tokenizer", file)
	if code, b := postChat(t, base, `{`+msgs+`}`); code != 400 || !strings.Contains(string(b), "chat template") {
		t.Errorf("tokenizer file without --chat-template: %d %s; want 400 about the chat template", code, b)
	}

	tmpl := writeFile(t, "t.jinja", "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
	base = startSim(t, "--tokenizer", file, "--chat-template", tmpl)
	code, b := postChat(t, base, `{`+msgs+`,"max_tokens":2}`)
	var out openai.ChatCompletion
	if err := json.Unmarshal(b, &out); code != 200 || err != nil || out.Usage == nil {
		t.Fatalf("with --chat-template: %d %s", code, b)
	}
	want, err := loadQwen3(t).Encode(nil, "user: hi\n", false)
	if err != nil {
		t.Fatal(err)
	}
	if out.Usage.PromptTokens != len(want) {
		t.Errorf("prompt_tokens %d, want %d (the template's text)", out.Usage.PromptTokens, len(want))
	}
	tools := `,"tools":[{"type":"function","function":{"name":"f"}}]`
	if code, b := postChat(t, base, `{`+msgs+tools+`}`); code != 400 || !strings.Contains(string(b), "tool-call-parser") {
		t.Errorf("tools without --tool-call-parser: %d %s; want vLLM's 400", code, b)
	}
	if code, b := postChat(t, base, `{`+msgs+tools+`,"tool_choice":"none","max_tokens":1}`); code != 200 {
		t.Errorf("tools with tool_choice none: %d %s; want 200", code, b)
	}
}

func TestChatFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--chat-template", "x.jinja"},
		{"--reasoning-parser", "qwen3"},
		{"--tokenizer", "x", "--reasoning-parser", "nope"},
		{"--tokenizer", "x", "--tool-call-parser", "nope"},
		{"--tokenizer", "x", "--reasoning-parser", "qwen3", "--tool-call-parser", "openai"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if _, err := parseFlags(args, io.Discard); err == nil {
				t.Errorf("parseFlags(%q): got nil error", args)
			}
		})
	}
}
