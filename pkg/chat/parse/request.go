package parse

import (
	"strings"

	"github.com/kvgate/kvgate/pkg/openai"
)

// RequestInfo is what a parser needs to know about the request whose output it parses.
// The zero value is a request without tools whose prompt leaves reasoning open.
type RequestInfo struct {
	// ToolsGiven is true when the request has a non-empty tools list.
	ToolsGiven bool
	// ToolChoice is the request's tool_choice when it is a string: "", "auto", "none" or
	// "required" ("" means absent, which vLLM treats as "auto" when tools are given).
	ToolChoice string
	// NamedTool is the function name of a named tool_choice ({"type":"function",...}); it
	// overrides ToolChoice.
	NamedTool string
	// ReasoningEnded is true when the prompt already closes reasoning, so the whole output is
	// content: Qwen3 templates with enable_thinking=false end the prompt with
	// "<think>\n\n</think>\n\n" (see PromptEndsReasoning).
	ReasoningEnded bool
}

// InfoFor describes a chat request to the output parsers: its tools and tool_choice, and
// whether its rendered prompt already ends reasoning (PromptEndsReasoning; prompt "" when the
// request was not rendered). The gateway's gRPC path and the simulator's HTTP path both use it,
// so the two parse one request alike.
func InfoFor(req *openai.ChatRequest, prompt string) RequestInfo {
	info := RequestInfo{ToolsGiven: len(req.Tools) > 0, ToolChoice: req.ToolChoice.Mode,
		ReasoningEnded: prompt != "" && PromptEndsReasoning(prompt)}
	if req.ToolChoice.Mode == openai.ToolChoiceFunction {
		info.ToolChoice, info.NamedTool = "", req.ToolChoice.Name
	}
	return info
}

// ResponseRole is the role of a chat answer: "assistant" after a generation prompt, else the
// last message's role (vLLM's get_chat_request_role, for continue_final_message).
func ResponseRole(req *openai.ChatRequest) string {
	if req.AddGenerationPrompt || len(req.Messages) == 0 {
		return "assistant"
	}
	return req.Messages[len(req.Messages)-1].Role
}

// PromptEndsReasoning reports whether a rendered prompt already closes reasoning for the
// <think> parsers: its last "</think>" comes after its last "<think>" (vLLM's is_reasoning_end on
// the prompt ids, vllm/reasoning/basic_parsers.py). Set RequestInfo.ReasoningEnded from it.
func PromptEndsReasoning(prompt string) bool {
	end := strings.LastIndex(prompt, thinkEnd)
	return end >= 0 && end > strings.LastIndex(prompt, thinkStart)
}
