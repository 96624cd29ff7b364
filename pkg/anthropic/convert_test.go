package anthropic

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// pyInputs are tool inputs whose json.dumps spelling differs from compact JSON in every way
// there is: separators, non-ASCII and control characters, escapes, surrogates, numbers as
// Python's int and float print them, repeated members, nesting.
var pyInputs = []string{
	`{}`,
	`{"location":"San Francisco, CA","unit":"c"}`,
	`{"z":1,"a":{"y":[1,2,{"k":null}],"b":true,"c":false},"e":[]}`,
	`{"path":"C:\\dir\\f.go","q":"say \"hi\"\n\ttab\r\b\f","slash":"a\/b","ctl":"\u0001\u001f\u007f"}`,
	`{"text":"héllo wörld — 日本語 🎉","esc":"\u00e9\ud83c\udf89\u0041","lone":"\ud800x\udfff"}`,
	`{"i":0,"n":-0,"big":123456789012345678901234567890,"neg":-42}`,
	`{"f":1.0,"g":1.50,"h":-0.0,"e1":1e2,"e2":1E-5,"e3":0.0001,"e4":1e16,"e5":1e15,"e6":123456789.123456789,"e7":2.5e-300,"e8":1.7976931348623157e308,"e9":0.1,"e10":1e400,"e11":-1e400,"e12":5e-324}`,
	`{"a":1,"b":2,"a":3}`,
	`{"a":1,"\u0061":2,"é":3,"\u00e9":4}`,
	` { "spaced" : [ 1 , "x" ] , "n" : { } } `,
	"{\"raw\":\"\x7f\"}",
}

// TestPyJSONMatchesPython: appendPyJSON spells each input exactly as Python's
// json.dumps(json.loads(input)) does, the arguments string vLLM puts in the chat request.
func TestPyJSONMatchesPython(t *testing.T) {
	in, _ := json.Marshal(pyInputs)
	cmd := exec.Command("/usr/bin/python3", "-c", `import json, sys
for s in json.load(sys.stdin):
    print(json.dumps(json.dumps(json.loads(s))))`)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(pyInputs) {
		t.Fatalf("python3 answered %d lines for %d inputs", len(lines), len(pyInputs))
	}
	for i, s := range pyInputs {
		var want string
		if err := json.Unmarshal([]byte(lines[i]), &want); err != nil {
			t.Fatal(err)
		}
		got, ok := appendPyJSON(nil, []byte(s))
		if !ok || string(got) != want {
			t.Errorf("input %s\ngot  %s (ok %v)\nwant %s", s, got, ok, want)
		}
	}
	if _, ok := appendPyJSON(nil, []byte(`{"a":}`)); ok {
		t.Error("accepted invalid JSON")
	}
}

// TestConvertToolCallsAndResults: the chat bodies vLLM's _convert_tool_use_block and
// _convert_user_tool_result build: arguments as json.dumps writes them (a missing input is
// "{}"), a tool_result's text blocks joined with "\n" into one string, its images in a user
// message right after its tool message, then the next tool message, then the user's own text.
func TestConvertToolCallsAndResults(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"arguments as json.dumps",
			`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"edit","input":{"file_path":"/src/ä.go","old":"x\ty","n":2,"r":0.50,"opts":{"all":false,"tags":["a","b"]}}},{"type":"tool_use","id":"t2","name":"ls"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[` +
				`{"id":"t1","type":"function","function":{"name":"edit","arguments":"{\"file_path\": \"/src/\\u00e4.go\", \"old\": \"x\\ty\", \"n\": 2, \"r\": 0.5, \"opts\": {\"all\": false, \"tags\": [\"a\", \"b\"]}}"}},` +
				`{"id":"t2","type":"function","function":{"name":"ls","arguments":"{}"}}]}],"max_tokens":5,"max_completion_tokens":5}`},
		{"tool_result texts joined, images after, then the user's text",
			`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"tool_use","id":"t2","name":"f","input":{}},{"type":"tool_use","id":"t3","name":"f","input":{}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"line 1"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}},{"type":"text","text":"line 2"},{"type":"image","source":{"type":"url","url":"https://x/b.png"}}]},` +
				`{"type":"tool_result","tool_use_id":"t2","content":"plain","is_error":true},{"type":"tool_result","tool_use_id":"t3"},{"type":"text","text":"go on"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"t2","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"t3","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
				`{"role":"tool","tool_call_id":"t1","content":"line 1\nline 2"},{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}},{"type":"image_url","image_url":{"url":"https://x/b.png"}}]},` +
				`{"role":"tool","tool_call_id":"t2","content":"plain"},{"role":"tool","tool_call_id":"t3","content":""},{"role":"user","content":"go on"}],"max_tokens":5,"max_completion_tokens":5}`},
		{"tool_result of images only, empty texts kept in the join",
			`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":""},{"type":"text","text":"b"},{"type":"image","source":{"type":"url","url":"u"}}]}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"t1","content":"\nb"},{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}],"max_tokens":5,"max_completion_tokens":5}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, aerr := Parse([]byte(tt.body), false)
			if aerr != nil {
				t.Fatal(aerr)
			}
			if got := string(req.ChatBody()); got != tt.want {
				t.Errorf("chat body\ngot  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestConvertThinking: output_config.effort and thinking as vLLM's _handle_output_config and
// _handle_thinking set them, in that order; count_tokens bodies have neither.
func TestConvertThinking(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	const head = `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":4096,"max_completion_tokens":4096`
	tests := []struct {
		name, members, want string
		disabled            bool
	}{
		{"effort", `"output_config":{"effort":"xhigh"}`, head + `,"reasoning_effort":"xhigh"}`, false},
		{"disabled", `"thinking":{"type":"disabled"}`, head + `,"reasoning_effort":"none"}`, true},
		{"disabled over an effort", `"output_config":{"effort":"high"},"thinking":{"type":"disabled"}`, head + `,"reasoning_effort":"none"}`, true},
		{"enabled: a budget, the effort kept", `"output_config":{"effort":"low"},"thinking":{"type":"enabled","budget_tokens":2048,"display":"omitted"}`, head + `,"thinking_token_budget":2048,"reasoning_effort":"low"}`, false},
		{"adaptive sets nothing", `"thinking":{"type":"adaptive"}`, head + `}`, false},
		{"adaptive under an effort", `"thinking":{"type":"adaptive"},"output_config":{"effort":"max"}`, head + `,"reasoning_effort":"max"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, aerr := Parse([]byte(`{"model":"m","max_tokens":4096,`+tt.members+`,`+msgs+`}`), false)
			if aerr != nil {
				t.Fatal(aerr)
			}
			if got := string(req.ChatBody()); got != tt.want {
				t.Errorf("chat body\ngot  %s\nwant %s", got, tt.want)
			}
			if req.DisabledThinking() != tt.disabled {
				t.Errorf("DisabledThinking %v", req.DisabledThinking())
			}
			// count_tokens: vLLM's AnthropicCountTokensRequest has neither member.
			ct, aerr := Parse([]byte(`{"model":"m",`+tt.members+`,`+msgs+`}`), true)
			if aerr != nil {
				t.Fatal(aerr)
			}
			if want := `{"model":"m","messages":[{"role":"user","content":"x"}]}`; string(ct.ChatBody()) != want || ct.DisabledThinking() {
				t.Errorf("count_tokens body %s, want %s", ct.ChatBody(), want)
			}
		})
	}
}

// TestSetDisabledThinkingEffort: the model's effort for disabled thinking replaces "none" in
// both bodies, once; other requests keep theirs.
func TestSetDisabledThinkingEffort(t *testing.T) {
	req, aerr := Parse([]byte(`{"model":"m","max_tokens":5,"system":"S","thinking":{"type":"disabled"},"messages":[{"role":"user","content":"q"},{"role":"system","content":"note"}]}`), false)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if req.FoldedChatBody() == nil {
		t.Fatal("no folded body")
	}
	req.SetDisabledThinkingEffort("low")
	req.SetDisabledThinkingEffort("high")
	for _, b := range [][]byte{req.ChatBody(), req.FoldedChatBody()} {
		if !bytes.HasSuffix(b, []byte(`,"reasoning_effort":"low"}`)) || bytes.Contains(b, []byte(`"none"`)) {
			t.Errorf("body %s", b)
		}
	}
	other, _ := Parse([]byte(`{"model":"m","max_tokens":5,"output_config":{"effort":"high"},"messages":[{"role":"user","content":"q"}]}`), false)
	before := string(other.ChatBody())
	other.SetDisabledThinkingEffort("low")
	if string(other.ChatBody()) != before {
		t.Errorf("a request that does not disable thinking changed: %s", other.ChatBody())
	}
}
