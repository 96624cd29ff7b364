package parse

import "github.com/kvgate/kvgate/pkg/openai"

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
