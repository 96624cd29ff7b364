package parse

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/pkg/openai"
)

func TestInfoForAndResponseRole(t *testing.T) {
	tools := `"tools":[{"type":"function","function":{"name":"f"}}]`
	ft := []openai.ChatTool{{Type: "function", Name: "f"}}
	tests := []struct {
		name, body, prompt string
		want               RequestInfo
		role               string
	}{
		{"plain", `{"messages":[{"role":"user","content":"hi"}]}`, "", RequestInfo{ToolChoice: "none"}, "assistant"},
		{"tools default auto", `{"messages":[{"role":"user","content":"hi"}],` + tools + `}`, "", RequestInfo{ToolsGiven: true, ToolChoice: "auto", Tools: ft}, "assistant"},
		{"named tool", `{"messages":[{"role":"user","content":"hi"}],` + tools + `,"tool_choice":{"type":"function","function":{"name":"f"}}}`, "",
			RequestInfo{ToolsGiven: true, NamedTool: "f", Tools: ft}, "assistant"},
		{"prompt ends reasoning", `{"messages":[{"role":"user","content":"hi"}]}`, "<|im_start|>assistant\n<think>\n\n</think>\n\n",
			RequestInfo{ToolChoice: "none", ReasoningEnded: true}, "assistant"},
		{"thinking switch on", `{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"thinking":true}}`, "",
			RequestInfo{ToolChoice: "none", Thinking: ThinkingOn}, "assistant"},
		{"enable_thinking off", `{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":0}}`, "",
			RequestInfo{ToolChoice: "none", Thinking: ThinkingOff}, "assistant"},
		{"thinking wins over enable_thinking", `{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"thinking":"","enable_thinking":true}}`, "",
			RequestInfo{ToolChoice: "none", Thinking: ThinkingOff}, "assistant"},
		{"GLM prompt: only the last assistant turn counts", `{"messages":[{"role":"user","content":"hi"}]}`,
			"<|assistant|>\n<think></think>\nok<|user|>\nhi<|assistant|>", RequestInfo{ToolChoice: "none"}, "assistant"},
		{"GLM prompt with thinking off", `{"messages":[{"role":"user","content":"hi"}]}`,
			"<|user|>\nhi<|assistant|>\n<think></think>\n", RequestInfo{ToolChoice: "none", ReasoningEnded: true}, "assistant"},
		{"mistral prompt ends reasoning", `{"messages":[{"role":"user","content":"hi"}]}`, "[INST]hi[/INST][THINK][/THINK]",
			RequestInfo{ToolChoice: "none", ReasoningEnded: true}, "assistant"},
		{"continue final message", `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hel"}],"add_generation_prompt":false,"continue_final_message":true}`, "",
			RequestInfo{ToolChoice: "none"}, "assistant"},
		{"no generation prompt after user", `{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}`, "",
			RequestInfo{ToolChoice: "none"}, "user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, aerr := openai.ParseChat([]byte(tt.body), openai.Limits{})
			if aerr != nil {
				t.Fatal(aerr)
			}
			if d := cmp.Diff(tt.want, InfoFor(req, tt.prompt)); d != "" {
				t.Errorf("InfoFor (-want +got):\n%s", d)
			}
			if got := ResponseRole(req); got != tt.role {
				t.Errorf("ResponseRole: got %q, want %q", got, tt.role)
			}
		})
	}
}
