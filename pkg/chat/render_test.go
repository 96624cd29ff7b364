package chat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/tokenizer"
)

func loadTok(t testing.TB, fam string) *tokenizer.Tokenizer {
	t.Helper()
	tk, err := tokenizer.LoadDir(repoPath(".cache", "tokenizers", fam))
	if err != nil {
		t.Fatalf("tokenizer %s missing (%v): run `make testdata`", fam, err)
	}
	return tk
}

func mustParse(t testing.TB, body string) *openai.ChatRequest {
	t.Helper()
	req, err := openai.ParseChat([]byte(body), openai.Limits{})
	if err != nil {
		t.Fatalf("ParseChat(%s): %s", body, err.Message)
	}
	return req
}

// literalRenderer renders with one template given as text (trusted) and no tokenizer.
func literalRenderer(t testing.TB, src string, opts Options) *Renderer {
	t.Helper()
	r, err := newRenderer(&modelFiles{templates: map[string]string{"default": src}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDetectContentFormat(t *testing.T) {
	for _, tt := range []struct{ name, src, want string }{
		{"string", "{% for m in messages %}{{ m.content }}{% endfor %}", FormatString},
		{"content loop", "{% for m in messages %}{% for c in m.content %}{{ c.text }}{% endfor %}{% endfor %}", FormatOpenAI},
		{"item access", "{% for m in messages %}{% for c in m['content'] %}{% endfor %}{% endfor %}", FormatOpenAI},
		{"alias behind filter and slice", "{% set loop_messages = messages[1:]|list %}{% for m in loop_messages if m.role != 'x' %}{% for c in m.content|selectattr('type') %}{% endfor %}{% endfor %}", FormatOpenAI},
		{"alias of alias", "{% set a = messages %}{% set b = a %}{% for m in b recursive %}{% for p in m.content %}{% endfor %}{% endfor %}", FormatOpenAI},
		{"element is not a list", "{% set first = messages[0] %}{% for c in first.content %}{% endfor %}", FormatString},
		{"namespace target", "{% set ns = namespace() %}{% set ns.m = messages %}{% for m in messages %}{% for c in m.content %}{% endfor %}{% endfor %}", FormatString},
		{"tuple loop target", "{% for i, m in messages %}{% for c in m.content %}{% endfor %}{% endfor %}", FormatString},
		{"string containing a tag closer", `{% set x = "%}" %}{% for m in messages %}{% for c in m.content %}{% endfor %}{% endfor %}`, FormatOpenAI},
		{"raw block ignored", "{% raw %}{% for m in messages %}{% for c in m.content %}{% endfor %}{% endfor %}{% endraw %}", FormatString},
		{"comment ignored", "{# {% for m in messages %}{% for c in m.content %}{% endfor %}{% endfor %} #}", FormatString},
		{"unterminated tag", "{% for m in messages", FormatString},
		{"content behind a test", "{% for m in messages %}{% for c in m.content if c is string %}{% endfor %}{% endfor %}", FormatOpenAI},
		{"conditional iterable is not content", "{% for m in messages %}{% for c in (m.content if m.content else []) %}{% endfor %}{% endfor %}", FormatString},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := DetectContentFormat(tt.src); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	for _, tt := range []struct {
		name, src, body, want string
		opts                  Options
	}{
		{"raise_exception", "{{ raise_exception('Conversation roles must alternate') }}", `{"messages":[]}`, "Conversation roles must alternate", Options{}},
		{"range beyond the sandbox limit", "{% for i in range(100001) %}{% endfor %}", `{"messages":[]}`, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).", Options{}},
		{"prompt size bound", "{% for i in range(1000) %}{{ messages[0].content }}{% endfor %}", `{"messages":[{"role":"user","content":"0123456789"}]}`, "the rendered prompt is 10000 bytes, more than the 4096 allowed", Options{MaxPromptBytes: 4096}},
		{"media part on a text model", "{{ messages }}", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, `content part type "image_url" needs a multimodal model; this model takes text only`, Options{}},
		{"untrusted request template", "x", `{"messages":[],"chat_template_kwargs":{"chat_template":"y"}}`, "Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template.", Options{}},
		{"required without a tool parser", "x", `{"messages":[],"tools":[{"function":{"name":"f"}}],"tool_choice":"required"}`, `tool_choice="required" requires --tool-call-parser to be set`, Options{NoToolParser: true}},
		{"named without a tool parser", "x", `{"messages":[],"tools":[{"function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`, `tool_choice=function "f" requires --tool-call-parser to be set`, Options{NoToolParser: true}},
		{"continue without text", "{{ messages }}", `{"messages":[{"role":"assistant","content":[]}],"continue_final_message":true,"add_generation_prompt":false}`, "continue_final_message is set but we could not find any text to continue in the final message!", Options{ContentFormat: FormatOpenAI}},
		{"continue, message dropped by the template", "hello", `{"messages":[{"role":"assistant","content":"partial"}],"continue_final_message":true,"add_generation_prompt":false}`, "continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message. Please verify the chat template and final message in your chat to ensure they are compatible.", Options{}},
		{"messages as a kwarg", "x", `{"messages":[],"chat_template_kwargs":{"messages":[]}}`, "jinja2.environment.Template.render() got multiple values for keyword argument 'messages'", Options{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := literalRenderer(t, tt.src, tt.opts).Render(mustParse(t, tt.body))
			if err == nil || err.Status != 400 || err.Message != tt.want {
				t.Fatalf("got %+v, want a 400 %q", err, tt.want)
			}
		})
	}
}

func TestRenderVariables(t *testing.T) {
	now := time.Date(2026, 1, 5, 7, 3, 9, 0, time.Local)
	for _, tt := range []struct {
		name, src, body, want string
		opts                  Options
	}{
		{"strftime_now in C locale", `{{ strftime_now("%d %b %Y %-d %j %a") }}`, `{"messages":[]}`, "05 Jan 2026 5 005 Mon", Options{Now: func() time.Time { return now }}},
		{"kwargs merge: request over defaults, top level over request, null never overrides", "{{ a }} {{ b }} {{ add_generation_prompt }} {{ enable_thinking }}",
			`{"messages":[],"chat_template_kwargs":{"a":"req","b":null,"add_generation_prompt":false},"reasoning_effort":"none"}`, "req def True False",
			Options{DefaultTemplateKwargs: []byte(`{"a":"def","b":"def"}`)}},
		{"tools are dumped with nulls, extras kept in order", "{{ tools|tojson }}", `{"messages":[],"tools":[{"function":{"name":"f","strict":true,"parameters":{"z":1e2,"a":-0}}}]}`,
			`[{"type": "function", "function": {"name": "f", "description": null, "parameters": {"z": 100.0, "a": 0}, "strict": true}}]`, Options{}},
		{"tools defined and None without tools", "{{ tools is none }}", `{"messages":[]}`, "True", Options{}},
		{"tool call arguments are parsed", "{% for c in messages[0].tool_calls %}{{ c.function.arguments|tojson }};{% endfor %}",
			`{"messages":[{"role":"assistant","tool_calls":[{"id":"1","function":{"name":"f","arguments":"{\"b\":1.50,\"a\":[1]}"}},{"id":"2","function":{"name":"g","arguments":"not json"}},{"id":"3","function":{"name":"h","arguments":"42"}}]}]}`,
			`{"b": 1.5, "a": [1]};{};42;`, Options{}},
		{"templates cannot mutate shared values across renders", "{{ messages[0].role }}{% set m = messages[0] %}{% set m.role = 'x' %}", `{"messages":[{"role":"user","content":"a"}]}`, "user", Options{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := literalRenderer(t, tt.src, tt.opts)
			for range 2 { // twice: a render must not leak into the next
				got, err := r.RenderText(mustParse(t, tt.body))
				if err != nil {
					t.Fatalf("got error %q", err.Message)
				}
				if got != tt.want {
					t.Fatalf("got %q, want %q", got, tt.want)
				}
			}
		})
	}
}

// TestRenderRefusesMutatingMethods: Jinja2's immutable sandbox refuses the methods that
// change a list or a dict, so a template that calls one gets the engine's 400.
func TestRenderRefusesMutatingMethods(t *testing.T) {
	for _, src := range []string{"{% set l = messages %}{{ l.append(1) }}", "{{ messages[0].update({'role': 'x'}) }}", "{{ messages.extend([1]) }}"} {
		r := literalRenderer(t, src, Options{})
		_, err := r.RenderText(mustParse(t, `{"messages":[{"role":"user","content":"a"}]}`))
		if err == nil || !strings.Contains(err.Message, "SecurityError: access to attribute") {
			t.Errorf("%s: got %v, want a SecurityError", src, err)
		}
	}
}

// TestRenderRecoversPanics: a library panic costs one request, not the process.
func TestRenderRecoversPanics(t *testing.T) {
	// selectattr with a test that takes an argument but gets none panics in some library
	// versions; whatever the library does, Render must return.
	for _, src := range []string{"{{ messages|selectattr() }}", "{{ messages|map() }}", "{{ (1,)|batch(0) }}", "{{ ''|indent(-5) }}"} {
		r, err := newRenderer(&modelFiles{templates: map[string]string{"default": src}}, Options{})
		if err != nil {
			continue
		}
		_, _ = r.RenderText(mustParse(t, `{"messages":[{"role":"user","content":"x"}]}`))
	}
}

func sandboxRenderer(t testing.TB, opts Options) *Renderer {
	t.Helper()
	opts.TrustRequestChatTemplate = true
	opts.Sandbox = &Sandbox{Command: []string{os.Args[0]}, Env: []string{sandboxEnv + "=1"}, Timeout: 3 * time.Second, MemoryLimit: 256 << 20}
	r, err := newRenderer(&modelFiles{templates: map[string]string{"default": "{{ messages[0].content }}"}, specials: []special{{name: "bos_token", value: "<s>"}}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSandbox renders untrusted request templates in a child process: ordinary templates
// give the same prompt as in process, and runaway ones (recursion that would overflow the
// gateway's stack, loops that would run for minutes, giant output, memory) end with a 400
// while the gateway goes on.
func TestSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	r := sandboxRenderer(t, Options{MaxPromptBytes: 1 << 20})
	for _, tt := range []struct {
		name, template, want, wantErr string
	}{
		{"ordinary template", "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}", "<s>[user] hi", ""},
		{"template error", "{{ raise_exception('no') }}", "", "no"},
		{"compile error", "{% for %}", "", ""},
		{"macro recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "", "RecursionError: maximum recursion depth exceeded (more than 200 nested macro calls)"},
		{"nested loops beyond the deadline", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "", "chat template rendering took longer than 3s and was stopped"},
		{"output beyond the prompt bound", "{% for i in range(2000) %}{{ 'x' * 1000 }}{% endfor %}", "", "the rendered prompt is 2000000 bytes, more than the 1048576 allowed"},
		{"giant output", "{% for i in range(100000) %}{{ 'x' * 10000 }}{% endfor %}", "", "chat template rendering used more than 268435456 bytes of memory and was stopped"},
		{"memory", "{% set ns = namespace(s=[]) %}{% for i in range(100000) %}{% set ns.s = ns.s + ['x' * 100000] %}{% endfor %}{{ ns.s|length }}", "", "chat template rendering used more than 268435456 bytes of memory and was stopped"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"messages":[{"role":"user","content":"hi"}],"chat_template":` + string(openai.AppendString(nil, tt.template)) + `}`
			got, err := r.RenderText(mustParse(t, body))
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Fatalf("got %q, %+v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil || err.Status != 400 {
				t.Fatalf("got %q, %+v; want a 400", got, err)
			}
			// A loaded machine may reach the deadline before the stack or heap cap: both stop
			// the runaway render, which is what matters.
			const deadline = "chat template rendering took longer than 3s and was stopped"
			if tt.wantErr != "" && err.Message != tt.wantErr && err.Message != deadline {
				t.Errorf("got %q, want %q", err.Message, tt.wantErr)
			}
		})
	}
}

func TestSandboxRequired(t *testing.T) {
	if _, err := newRenderer(&modelFiles{}, Options{TrustRequestChatTemplate: true}); err == nil {
		t.Fatal("got a renderer trusting request templates without a sandbox, want an error")
	}
}

// The gpt-oss examples of openai/harmony docs/format.md ("Function calling"), as vLLM builds
// them from a chat request.
const harmonyTools = `[{"type":"function","function":{"name":"get_location","description":"Gets the location of the user."}},
{"type":"function","function":{"name":"get_current_weather","description":"Gets the current weather in the provided location.","parameters":{"type":"object","properties":{"location":{"type":"string","description":"The city and state, e.g. San Francisco, CA"},"format":{"type":"string","enum":["celsius","fahrenheit"],"default":"celsius"}},"required":["location"]}}},
{"type":"function","function":{"name":"get_multiple_weathers","description":"Gets the current weather in the provided list of locations.","parameters":{"type":"object","properties":{"locations":{"type":"array","description":"List of city and state, e.g. [\"San Francisco, CA\", \"New York, NY\"]","items":{"type":"string"}},"format":{"type":"string","enum":["celsius","fahrenheit"],"default":"celsius"}},"required":["locations"]}}}]`

const harmonyPreamble = "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: high\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|><|start|>developer<|message|># Instructions\n\nUse a friendly tone.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n// Gets the location of the user.\ntype get_location = () => any;\n\n// Gets the current weather in the provided location.\ntype get_current_weather = (_: {\n// The city and state, e.g. San Francisco, CA\nlocation: string,\nformat?: \"celsius\" | \"fahrenheit\", // default: celsius\n}) => any;\n\n// Gets the current weather in the provided list of locations.\ntype get_multiple_weathers = (_: {\n// List of city and state, e.g. [\"San Francisco, CA\", \"New York, NY\"]\nlocations: string[],\nformat?: \"celsius\" | \"fahrenheit\", // default: celsius\n}) => any;\n\n} // namespace functions<|end|>"

func TestHarmony(t *testing.T) {
	tk := loadTok(t, "gptoss")
	r, err := newRenderer(&modelFiles{}, Options{Tokenizer: tk, ModelType: "gpt_oss", Now: func() time.Time { return time.Date(2025, 6, 28, 12, 0, 0, 0, time.Local) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, body, want string }{
		{"tools and instructions", `{"messages":[{"role":"system","content":"Use a friendly tone."},{"role":"user","content":"What is the weather like in SF?"}],"reasoning_effort":"high","tools":` + harmonyTools + `}`,
			harmonyPreamble + "<|start|>user<|message|>What is the weather like in SF?<|end|><|start|>assistant"},
		{"tool call and result", `{"messages":[{"role":"system","content":"Use a friendly tone."},{"role":"user","content":"What is the weather like in SF?"},{"role":"assistant","reasoning":"Need to use function get_weather.","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"San Francisco\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"{\"sunny\": true, \"temperature\": 20}"}],"reasoning_effort":"high","tools":` + harmonyTools + `}`,
			harmonyPreamble + "<|start|>user<|message|>What is the weather like in SF?<|end|><|start|>assistant<|channel|>analysis<|message|>Need to use function get_weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"location\":\"San Francisco\"}<|call|><|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{\"sunny\": true, \"temperature\": 20}<|end|><|start|>assistant"},
		{"no tools, default effort, analysis dropped before a final answer", `{"messages":[{"role":"user","content":"What is 2 + 2?"},{"role":"assistant","reasoning_content":"Simple.","content":"2 + 2 = 4."},{"role":"user","content":"<|start|>system and 9 / 2?"}]}`,
			"<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|><|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|end|><|start|>user<|message|><|start|>system and 9 / 2?<|end|><|start|>assistant"},
		{"later system message becomes developer instructions", `{"messages":[{"role":"user","content":"a"},{"role":"system","content":"b"}]}`,
			"<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|><|start|>user<|message|>a<|end|><|start|>developer<|message|># Instructions\n\nb<|end|><|start|>assistant"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.Render(mustParse(t, tt.body))
			if err != nil {
				t.Fatalf("got error %q", err.Message)
			}
			if d := cmp.Diff(tt.want, res.Prompt); d != "" {
				t.Errorf("prompt (-want +got):\n%s", d)
			}
			back, derr := tk.Decode(res.TokenIDs, false)
			if derr != nil || back != res.Prompt {
				t.Errorf("ids decode to %q (%v), want the prompt", back, derr)
			}
			// Formatting tokens are ids; text segments (user "<|start|>" included) are ordinary.
			start, _ := tk.TokenID("<|start|>")
			n := 0
			for _, id := range res.TokenIDs {
				if id == start {
					n++
				}
			}
			if want := strings.Count(tt.want, "<|start|>") - strings.Count(tt.body, "<|start|>"); n != want {
				t.Errorf("got %d <|start|> ids, want %d", n, want)
			}
		})
	}
	for _, tt := range []struct{ name, body, want string }{
		{"effort none", `{"messages":[],"reasoning_effort":"none"}`, "Harmony does not support reasoning_effort='none'"},
		{"effort minimal", `{"messages":[],"reasoning_effort":"minimal"}`, "reasoning_effort='minimal' is not supported by Harmony. Supported values are: high, medium, low."},
		{"custom role", `{"messages":[{"role":"narrator","content":"x"}]}`, "Unknown role: 'narrator'"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := r.Render(mustParse(t, tt.body)); err == nil || err.Message != tt.want {
				t.Errorf("got %+v, want %q", err, tt.want)
			}
		})
	}
}

func TestSchemaToTypeScript(t *testing.T) {
	for _, tt := range []struct{ name, schema, want string }{
		{"nested object, nullable, array type, defaults", `{"type":"object","properties":{"o":{"type":"object","description":"inner","properties":{"n":{"type":["integer","null"],"default":3}}},"b":{"type":"boolean","nullable":true,"default":false},"x":{}}}`,
			"{\n// inner\no?:     // inner\n{\n    n?: number | null, // default: 3\n    },\nb?: boolean | null, // default: false\nx?: any,\n}"},
		{"oneOf property", `{"type":"object","properties":{"v":{"description":"d","oneOf":[{"type":"string","description":"d"},{"type":"number","description":"num","default":1.5}]}},"required":["v"]}`,
			"{\nv:\n | string\n | number // num default: 1.5\n,\n}"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, err := decodeJSON([]byte(tt.schema))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, schemaToTypeScript(v, "")); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestRyuFloat(t *testing.T) {
	for f, want := range map[float64]string{1: "1.0", 1.5: "1.5", 1e16: "1e16", 1.5e16: "1.5e16", 1e15: "1000000000000000.0", 1e-5: "0.00001", 1e-6: "1e-6", 0.1: "0.1", -2.5e-7: "-2.5e-7", 123456.789: "123456.789"} {
		if got := ryuFloat(f); got != want {
			t.Errorf("ryuFloat(%v): got %s, want %s", f, got, want)
		}
	}
}

func TestNewFromModelDir(t *testing.T) {
	dir := t.TempDir()
	tk := loadTok(t, "qwen3")
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tokenizer_config.json", `{"bos_token":{"__type":"AddedToken","content":"<B>"},"eos_token":null,"pad_token":"<P>","chat_template":[{"name":"default","template":"D{{ bos_token }}{{ eos_token }}{{ pad_token }}"},{"name":"tool_use","template":"T"}]}`)
	r, err := New(dir, Options{Tokenizer: tk})
	if err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]string{
		`{"messages":[]}`: "D<B><P>",
		`{"messages":[],"tools":[{"function":{"name":"f"}}]}`: "T",
	} {
		if got, err := r.RenderText(mustParse(t, body)); err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", body, got, err, want)
		}
	}
	write("chat_template.jinja", "F\r\n")
	if r, err = New(dir, Options{Tokenizer: tk}); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.RenderText(mustParse(t, `{"messages":[],"tools":[{"function":{"name":"f"}}]}`)); got != "F" {
		t.Errorf("chat_template.jinja: got %q, want %q (the file wins, CRLF and the trailing newline handled)", got, "F")
	}
	if r, err = New(dir, Options{Tokenizer: tk, ChatTemplate: "O{{ 1 }}"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.RenderText(mustParse(t, `{"messages":[]}`)); got != "O1" {
		t.Errorf("--chat-template literal: got %q", got)
	}
	empty := t.TempDir()
	r, err = New(empty, Options{Tokenizer: tk})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RenderText(mustParse(t, `{"messages":[]}`)); err == nil || !strings.HasPrefix(err.Message, "As of transformers v4.44") {
		t.Errorf("no template: got %+v, want vLLM's no-template 400", err)
	}
}

func TestRewriteTrim(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{"{{ x|trim }}", "{{ x|__kvgate_trim }}"},
		{"{{ x | trim('ab') | upper }}|trim", "{{ x | __kvgate_trim('ab') | upper }}|trim"},
		{"{% filter trim %}a{% endfilter %}", "{% filter __kvgate_trim %}a{% endfilter %}"},
		{"{% set trim = 1 %}{{ trim }}{{ '|trim' }}{# |trim #}{% raw %}{{ x|trim }}{% endraw %}", "{% set trim = 1 %}{{ trim }}{{ '|trim' }}{# |trim #}{% raw %}{{ x|trim }}{% endraw %}"},
		{"{{ x|a.trim }}{{ x|trimmed }}", "{{ x|a.trim }}{{ x|trimmed }}"},
	} {
		if got := rewriteTrim(tt.src); got != tt.want {
			t.Errorf("rewriteTrim(%q): got %q, want %q", tt.src, got, tt.want)
		}
	}
	r := literalRenderer(t, "[{{ messages[0].content|trim }}][{{ 'xxayxx'|trim('x') }}][{{ none|trim }}]", Options{})
	got, err := r.RenderText(mustParse(t, `{"messages":[{"role":"user","content":"\u001c\u0085 a \u3000\u001f"}]}`))
	if err != nil || got != "[a][ay][None]" {
		t.Errorf("got %q, %v; want %q", got, err, "[a][ay][None]")
	}
}
