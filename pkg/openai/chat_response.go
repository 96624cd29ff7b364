package openai

// Chat completion response shapes, as vLLM's OpenAI server writes them
// (vllm/entrypoints/openai/chat_completion/serving.py and protocol.py): the non-streaming
// chat.completion body, and the chat.completion.chunk events of a stream (a first chunk per
// choice with role and empty content, then deltas, the last one carrying finish_reason; with
// stream_options.include_usage a final chunk with no choices and the usage; then [DONE]).

// Object names of chat responses.
const (
	ObjectChatCompletion      = "chat.completion"
	ObjectChatCompletionChunk = "chat.completion.chunk"
)

// ChatCompletion is the non-streaming body of /v1/chat/completions.
type ChatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *Usage       `json:"usage,omitempty"`
}

// ChatChoice is one choice of a ChatCompletion.
type ChatChoice struct {
	Index        int                 `json:"index"`
	Message      ChatResponseMessage `json:"message"`
	Logprobs     any                 `json:"logprobs"`
	FinishReason string              `json:"finish_reason"`
}

// ChatResponseMessage is the assistant message of a choice. Content is null when the model
// only called tools; the reasoning fields are present only when a reasoning parser split some
// out (Reasoning is the field current vLLM writes, ReasoningContent the name SGLang, older vLLM
// and most clients read); ToolCalls is always a list, empty without calls, as vLLM writes it.
type ChatResponseMessage struct {
	Role             string             `json:"role"`
	Content          *string            `json:"content"`
	Reasoning        *string            `json:"reasoning,omitempty"`
	ReasoningContent *string            `json:"reasoning_content,omitempty"`
	ToolCalls        []ResponseToolCall `json:"tool_calls"`
}

// ResponseToolCall is one function call of a response message; Function.Arguments is a JSON
// text.
type ResponseToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the called function and its arguments (a JSON text).
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatChunk is one chat.completion.chunk event.
type ChatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *Usage            `json:"usage,omitempty"`
}

// ChatChunkChoice is one choice's delta; FinishReason is null until the choice's last chunk.
type ChatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        ChatDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

// ChatDelta is the increment of a streamed message: only the fields set are written (the first
// chunk of a choice carries role and an empty content; a choice's last chunk may be empty).
type ChatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	Reasoning        *string         `json:"reasoning,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCallDelta `json:"tool_calls,omitempty"`
}

// ToolCallDelta is the increment of one tool call: its first delta carries id, type and the
// function name, the later ones fragments of the arguments.
type ToolCallDelta struct {
	Index    int            `json:"index"`
	ID       string         `json:"id,omitempty"`
	Type     string         `json:"type,omitempty"`
	Function *FunctionDelta `json:"function,omitempty"`
}

// FunctionDelta is the function part of a ToolCallDelta.
type FunctionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}
